package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
)

func (m *Main) submitCommand() *cobra.Command {
	var f clientFlags
	var id, kind, repo, ref string
	var bringBack []string
	var maxRequeues, priority int
	var labels []string
	var notBefore string
	var renew, grace, toleration float64
	cmd := &cobra.Command{
		Use:   "submit --id ID --kind run|evaluation [--repo R --ref REF] [--bring-back PATH]... [--max-requeues N] [--priority N] [--not-before TIME] [--label K=V]... [--renew-seconds S --grace-seconds S --toleration-seconds S] -- COMMAND...",
		Short: "Submit a job (idempotent on its id)",
		RunE: func(cmd *cobra.Command, args []string) error {
			// What the CLI can tell is missing, it says before any call.
			switch {
			case id == "":
				return errors.New("submit: --id is required: the job's id, chosen by you (submission is idempotent on it)")
			case kind == "":
				return errors.New("submit: --kind is required: run or evaluation")
			case len(args) == 0:
				return errors.New("submit: give the command to run after --")
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			spec := api.Spec{Run: strings.Join(args, " "), BringBack: bringBack}
			if repo != "" {
				spec.Checkout = &api.Checkout{Repo: repo, Ref: ref}
			} else if ref != "" {
				return errors.New("submit: --ref needs --repo")
			}
			raw, err := json.Marshal(spec)
			if err != nil {
				return err
			}
			in := api.Submit{ID: id, Kind: kind, Spec: raw, Priority: priority, NotBefore: notBefore}
			if in.Labels, err = api.ParseLabels(labels); err != nil {
				return fmt.Errorf("submit: --label: %w", err)
			}
			if cmd.Flags().Changed("max-requeues") {
				in.MaxRequeues = &maxRequeues
			}
			for _, t := range []struct {
				flag string
				v    *float64
				to   **float64
			}{{"renew-seconds", &renew, &in.RenewSeconds}, {"grace-seconds", &grace, &in.GraceSeconds}, {"toleration-seconds", &toleration, &in.TolerationSeconds}} {
				if cmd.Flags().Changed(t.flag) {
					*t.to = t.v
				}
			}
			j, created, err := c.Submit(cmd.Context(), in)
			if err != nil {
				return fmt.Errorf("submit %s: %w", id, err)
			}
			p := f.printer(cmd.OutOrStdout(), jobHeader()...)
			jobRow(p, j)
			p.flush()
			if !created && f.output == "table" {
				fmt.Fprintf(cmd.ErrOrStderr(), "job %s existed already with this spec: nothing submitted\n", id)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&id, "id", "", "the job's id, chosen by you (required)")
	cmd.Flags().StringVar(&kind, "kind", "", "run (an agent session) or evaluation (required)")
	cmd.Flags().StringVar(&repo, "repo", "", "git repository to check out into a worktree")
	cmd.Flags().StringVar(&ref, "ref", "", "ref to check out (default HEAD)")
	cmd.Flags().StringArrayVar(&bringBack, "bring-back", nil, "path to commit and bring back as refs/leaselog/JOB/LEASE (repeatable)")
	cmd.Flags().IntVar(&maxRequeues, "max-requeues", 0, "an evaluation lost once more than this many requeues fails (\"lost N times\"); 0: no cap (default: the daemon's plugins.executor.max_requeues)")
	cmd.Flags().IntVar(&priority, "priority", 0, "higher goes first among the jobs a worker can take")
	cmd.Flags().StringVar(&notBefore, "not-before", "", "RFC 3339 time before which the job is granted to no one (at most a year ahead)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "KEY=VALUE a worker must offer to take the job (repeatable)")
	cmd.Flags().Float64Var(&renew, "renew-seconds", 0, "the job's own renew: its worker heartbeats at least this often (default: the daemon's)")
	cmd.Flags().Float64Var(&grace, "grace-seconds", 0, "the job's own grace (default: the daemon's)")
	cmd.Flags().Float64Var(&toleration, "toleration-seconds", 0, "the job's own toleration: its lease expires after this long unheard (default: the daemon's; at most plugins.executor.max_toleration_seconds)")
	return cmd
}

func (m *Main) revokeCommand(kill bool) *cobra.Command {
	var f clientFlags
	use, short := "cancel JOB", "Cancel a job: at once if queued; if leased, its worker stops it (SIGTERM, then SIGKILL) at its next heartbeat"
	verb, reason := "cancel", event.ReasonCancelled
	if kill {
		use, short = "kill JOB", "Kill a job: at once if queued; if leased, its worker kills it (SIGKILL) at its next heartbeat"
		verb, reason = "kill", event.ReasonKilled
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			call := c.Cancel
			if kill {
				call = c.Kill
			}
			j, err := call(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := endedBefore(verb, reason, j); err != nil {
				return err
			}
			p := f.printer(cmd.OutOrStdout(), jobHeader()...)
			jobRow(p, j)
			p.flush()
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

// errEnded is the error of a cancel or a kill of a job that had ended.
var errEnded = errors.New("the job had ended already")

// endedBefore tells a job that a cancel or a kill (verb) found ended: the
// daemon answers such a call with the job as it is. A job this call (or an
// earlier one like it) cancelled is cancelled with the call's own reason;
// any other end — reported, failed, cancelled otherwise — came before.
func endedBefore(verb, reason string, j api.Job) error {
	var how string
	switch j.State {
	case "reported":
		how = "reported " + j.Outcome
	case "failed":
		how = fmt.Sprintf("failed: %q", j.Reason)
	case "cancelled":
		if j.Reason == reason {
			return nil
		}
		how = fmt.Sprintf("cancelled: %q", j.Reason)
	default:
		return nil
	}
	return fmt.Errorf("%s %s: %w (%s): nothing to %s", verb, j.ID, errEnded, how, verb)
}

func (m *Main) jobsCommand() *cobra.Command {
	var f clientFlags
	var pf pageFlags
	var state, kind, outcome string
	var labels []string
	cmd := &cobra.Command{
		Use:   "jobs [JOB] [--state S] [--kind K] [--outcome O] [--label K=V]... [--limit N | --all]",
		Short: "List jobs, by id, a page at a time (--all: every page), or show one",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := pf.check(cmd); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			p := f.printer(cmd.OutOrStdout(), jobHeader()...)
			if len(args) == 1 {
				j, err := c.Job(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				jobRow(p, j)
				p.flush()
				return nil
			}
			next, err := each(&pf, func(after string) ([]api.Job, string, error) {
				page, err := c.JobsPage(cmd.Context(), api.JobQuery{State: state, Kind: kind, Outcome: outcome, Labels: strings.Join(labels, ","), Limit: pf.size(), After: after})
				return page.Jobs, page.Next, err
			}, func(j api.Job) { jobRow(p, j) })
			return pf.done(cmd.ErrOrStderr(), p, next, err)
		},
	}
	f.register(cmd)
	pf.register(cmd, "jobs")
	cmd.Flags().StringVar(&state, "state", "", "only jobs in this state")
	cmd.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	cmd.Flags().StringVar(&outcome, "outcome", "", "only jobs reported with this outcome: succeeded, failed, cancelled or killed (a job reported failed is in state reported)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only jobs that require KEY=VALUE (repeatable)")
	return cmd
}

func (m *Main) leasesCommand() *cobra.Command {
	var f clientFlags
	var pf pageFlags
	var state, worker, kind string
	cmd := &cobra.Command{
		Use:   "leases [--state S] [--worker W] [--limit N | --all]",
		Short: "List leases, by token, a page at a time (--all: every page): the live ones, or those in --state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := pf.check(cmd); err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			p := f.printer(cmd.OutOrStdout(), "LEASE", "JOB", "KIND", "WORKER", "STATE", "REVOKE", "ACQUIRED", "HEARD")
			next, err := each(&pf, func(after string) ([]api.Lease, string, error) {
				page, err := c.LeasesPage(cmd.Context(), api.LeaseQuery{State: state, Worker: worker, Kind: kind, Limit: pf.size(), After: after})
				return page.Leases, page.Next, err
			}, func(l api.Lease) {
				p.row(l, l.Lease, l.Job, l.Kind, l.Worker, l.State, l.Revoke, fmtTime(l.Acquired), fmtTime(l.Heard))
			})
			return pf.done(cmd.ErrOrStderr(), p, next, err)
		},
	}
	f.register(cmd)
	pf.register(cmd, "leases")
	cmd.Flags().StringVar(&state, "state", "", "acquired, running, reported or expired (default: the live ones)")
	cmd.Flags().StringVar(&worker, "worker", "", "only this worker's")
	cmd.Flags().StringVar(&kind, "kind", "", "only leases of jobs of this kind")
	return cmd
}
