package server_test

import (
	"slices"
	"strings"
	"testing"
)

// TestOpenAPILint holds docs/openapi.yaml to the rules of Redocly's
// "recommended" set that a document can break without being invalid (the
// contract test checks validity and every answer): servers named
// (no-empty-servers), every tag described and every operation's tag
// declared (tag-description, operation-tag-defined), every operation with a
// summary, a unique operationId, a 2xx (or default) answer and a 4xx one
// (operation-summary, operation-operationId-unique, operation-2xx-response,
// operation-4xx-response). `npx @redocly/cli lint docs/openapi.yaml` runs
// them all; this test keeps them in `make test`, which has no Node. Not
// checked: info-license, the one warning the linter gives, for the
// repository names no license to point to.
func TestOpenAPILint(t *testing.T) {
	doc, _ := loadDoc(t)
	if len(doc.Servers) == 0 || doc.Servers[0].URL == "" {
		t.Error("no servers (no-empty-servers)")
	}
	declared := map[string]bool{}
	for _, tag := range doc.Tags {
		declared[tag.Name] = true
		if strings.TrimSpace(tag.Description) == "" {
			t.Errorf("tag %s has no description (tag-description)", tag.Name)
		}
	}
	ids := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.Summary == "" {
				t.Errorf("%s: no summary (operation-summary)", where)
			}
			if op.OperationID == "" || ids[op.OperationID] != "" {
				t.Errorf("%s: operationId %q missing or also %s's (operation-operationId-unique)", where, op.OperationID, ids[op.OperationID])
			}
			ids[op.OperationID] = where
			for _, tag := range op.Tags {
				if !declared[tag] {
					t.Errorf("%s: tag %s is not declared (operation-tag-defined)", where, tag)
				}
			}
			codes := slices.Collect(func(yield func(string) bool) {
				for code := range op.Responses.Map() {
					if !yield(code) {
						return
					}
				}
			})
			if !slices.ContainsFunc(codes, func(c string) bool { return c == "default" || strings.HasPrefix(c, "2") }) {
				t.Errorf("%s: no 2xx answer, nor a default (operation-2xx-response): %v", where, codes)
			}
			if !slices.ContainsFunc(codes, func(c string) bool { return strings.HasPrefix(c, "4") }) {
				t.Errorf("%s: no 4xx answer (operation-4xx-response): %v", where, codes)
			}
		}
	}
}
