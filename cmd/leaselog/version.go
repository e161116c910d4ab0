package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leaselog/leaselog/internal/buildinfo"
)

func (m *Main) versionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version [-o json]",
		Short: "Show the version, the VCS revision and the Go version this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := buildinfo.Get()
			w := cmd.OutOrStdout()
			switch output {
			case "json":
				b, err := json.Marshal(struct {
					Version   string `json:"version"`
					Revision  string `json:"revision"`
					Modified  bool   `json:"modified"`
					Time      string `json:"time,omitempty"`
					GoVersion string `json:"goversion"`
					Platform  string `json:"platform"`
				}{in.Version, in.Revision, in.Modified, in.Time, in.GoVersion, in.Platform})
				if err != nil {
					return err
				}
				fmt.Fprintln(w, string(b))
			case "table":
				fmt.Fprintf(w, "leaselog %s\n", in.Version)
				rev := in.Revision
				if in.Modified {
					rev += " (built with uncommitted changes)"
				}
				if in.Time != "" {
					rev += ", committed " + in.Time
				}
				fmt.Fprintf(w, "revision %s\n", rev)
				fmt.Fprintf(w, "go       %s %s\n", in.GoVersion, in.Platform)
			default:
				return fmt.Errorf("-o %s: want table or json", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, or json")
	return cmd
}
