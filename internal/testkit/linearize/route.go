package linearize

import (
	"slices"
	"strings"

	"github.com/leaselog/leaselog/api"
)

// Route is a worker's offer in the model's terms: the kinds it takes
// (comma-separated; "" every kind) and the labels it offers, as a job's
// labels are written: "k=v" pairs sorted by key, comma-separated. Strings,
// so that an Input stays comparable.
type Route struct{ Kinds, Labels string }

// RouteOf is the model's form of offer o.
func RouteOf(o api.Offer) Route {
	return Route{Kinds: strings.Join(slices.Sorted(slices.Values(o.Kinds)), ","), Labels: LabelsOf(o.Labels)}
}

// LabelsOf is the model's form of labels m.
func LabelsOf(m map[string]string) string { return api.LabelsString(m) }

// takes reports whether a worker offering r may take a job of kind that
// requires labels (LabelsOf's form): it takes the kind, and offers each
// label with an equal value.
func (r Route) takes(kind, labels string) bool {
	if r.Kinds != "" && !slices.Contains(strings.Split(r.Kinds, ","), kind) {
		return false
	}
	if labels == "" {
		return true
	}
	offered := strings.Split(r.Labels, ",")
	for _, l := range strings.Split(labels, ",") {
		if !slices.Contains(offered, l) {
			return false
		}
	}
	return true
}
