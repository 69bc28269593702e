//go:build race

package main

// tokRaceEnabled: under the race detector the HF parity test of
// `dataprep tokenize` runs one configuration; all run in the plain `go test`.
const tokRaceEnabled = true
