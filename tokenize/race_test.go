//go:build race

package tokenize

// raceEnabled: under the race detector (10x slower) the corpus-wide tests
// run on a sample of lines; the full corpus runs in the plain `go test`.
const raceEnabled = true
