// Package version holds the release version and commit of ferry's
// commands. The one source of the version is python/ferry/__init__.py
// (__version__, which the wheel takes too); `make build` and `make wheel`
// stamp it and the git commit into the binaries:
//
//	go build -ldflags "-X github.com/ferryml/ferry/internal/version.Version=0.1.0 \
//	    -X github.com/ferryml/ferry/internal/version.Commit=0123456789ab" ./cmd/...
//
// A plain `go build` leaves Version "dev" and takes the commit from the
// Go toolchain's VCS stamp when there is one.
package version

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X at build time.
var (
	Version = "dev"
	Commit  = ""
)

// String returns "PROG VERSION (commit COMMIT, GOVERSION OS/ARCH)".
func String(prog string) string {
	commit := Commit
	if commit == "" {
		commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					commit = s.Value[:12]
				}
			}
		}
	}
	return prog + " " + Version + " (commit " + commit + ", " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// Requested reports whether args ask for the version only: "--version"
// or "-version", alone.
func Requested(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}
