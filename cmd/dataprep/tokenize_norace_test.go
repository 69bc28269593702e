//go:build !race

package main

const tokRaceEnabled = false
