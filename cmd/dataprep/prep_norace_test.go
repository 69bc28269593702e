//go:build !race

package main

const prepRaceEnabled = false
