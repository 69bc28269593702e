//go:build race

package main

// prepRaceEnabled: under the race detector TestSeedParity checks every
// file and both tokenizers but not every pair (3 of 6); plain go test runs all.
const prepRaceEnabled = true
