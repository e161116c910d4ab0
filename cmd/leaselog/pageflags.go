package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
)

// pageFlags are the paging flags of the list commands (jobs, leases, events,
// audit stale-reports): a list shows one page by default and says, on
// stderr, how to see more; --all shows every page.
type pageFlags struct {
	what  string // the items, for messages: "jobs"
	limit int
	all   bool
	after string
	// sized: --limit was given. With --all it is the size of each page;
	// without, --all reads the largest pages the daemon serves.
	sized bool
}

func (p *pageFlags) register(cmd *cobra.Command, what string) {
	p.what = what
	cmd.Flags().IntVar(&p.limit, "limit", api.DefaultLimit, fmt.Sprintf("show a page of at most N %s (1 to %d)", what, api.MaxLimit))
	cmd.Flags().BoolVar(&p.all, "all", false, "show all the "+what+", page after page")
	cmd.Flags().StringVar(&p.after, "after", "", "start after this cursor (the one a page that is not the last names)")
}

// check checks the flags as given to cmd.
func (p *pageFlags) check(cmd *cobra.Command) error {
	if p.limit < 1 || p.limit > api.MaxLimit {
		return fmt.Errorf("--limit %d: want 1 to %d", p.limit, api.MaxLimit)
	}
	p.sized = cmd.Flags().Changed("limit")
	return nil
}

// size is the limit of each request.
func (p *pageFlags) size() int {
	if p.all && !p.sized {
		return api.MaxLimit
	}
	return p.limit
}

// more tells that the page shown is not the last, and how to see the rest.
func (p *pageFlags) more(w io.Writer, next string) {
	fmt.Fprintf(w, "more %s follow: add --after %s for the next page, or --all for every one\n", p.what, next)
}

// each reads the pages of a list through fetch, from p.after, calling show
// for every item: every page with --all, else one. It returns the cursor
// of the next page when it stopped before the last ("" when it did not),
// for the caller to tell (more) once its rows are out.
func each[T any](p *pageFlags, fetch func(after string) ([]T, string, error), show func(T)) (string, error) {
	after := p.after
	for {
		items, next, err := fetch(after)
		if err != nil {
			return "", err
		}
		for _, it := range items {
			show(it)
		}
		switch {
		case next == "":
			return "", nil
		case !p.all:
			return next, nil
		case next == after:
			return "", fmt.Errorf("the daemon answered a page with its own cursor %q", next)
		}
		after = next
	}
}

// done writes the rows listed (see printer.end), then tells on w how to
// see more if next is set.
func (p *pageFlags) done(w io.Writer, pr *printer, next string, err error) error {
	pr.end(err)
	if err == nil && next != "" {
		p.more(w, next)
	}
	return err
}
