package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

// printVersion prints the module version and the build's VCS revision, time
// and Go version, from the information the Go toolchain embeds.
func printVersion(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		_, err := fmt.Fprintln(w, "policyrouter (no build information)")
		return err
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	rev := settings["vcs.revision"]
	if rev == "" {
		rev = "unknown"
	}
	if settings["vcs.modified"] == "true" {
		rev += " (modified)"
	}
	_, err := fmt.Fprintf(w, "policyrouter %s\n  revision %s\n  built from %s at %s\n  %s %s/%s\n",
		bi.Main.Version, rev, bi.Main.Path, valueOr(settings["vcs.time"], "an unknown time"),
		bi.GoVersion, valueOr(settings["GOOS"], "?"), valueOr(settings["GOARCH"], "?"))
	return err
}

func valueOr(v, otherwise string) string {
	if v == "" {
		return otherwise
	}
	return v
}
