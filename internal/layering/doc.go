// Package layering holds no code: its test keeps ferry's import graph in
// layers, as pebble's TestForbiddenImports and restic's depguard do. Read
// from `go list -json`, over every package of the module, with its tests:
//
//	cmd/…      the commands; nothing imports them
//	serve      the daemon: only cmd/ferry-serve, serve's own tests and
//	           other main packages may import it, never a library
//	shard, ckpt, internal/…
//	           libraries: never import cmd/ or serve
//	tokenize/… imports nothing of ferry outside tokenize/ (its tests may)
//	chattemplate/…
//	           imports nothing of ferry outside chattemplate/ (its tests may)
//
//	internal/cli       only commands (cmd/…) and bench import it (tests may)
//	internal/testutil  only tests and fixture mains (package main) import it
//	unsafe             only under an internal/ directory, tests included
//	storage.IsS3       called nowhere outside internal/storage but in tests
//	                   (a scan of the source: the location layer decides)
//
// `make lint` runs it, and so does `go test ./...`.
package layering
