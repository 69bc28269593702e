package shard_test

import (
	"github.com/ferryml/ferry/internal/testutil/arrowcheck"
	"github.com/ferryml/ferry/shard"
)

// arrowcheck imports shard, so this package's internal tests cannot import
// it; this external test file, linked into the same test binary, installs
// it for them before any test runs.
func init() { shard.CheckArrow = arrowcheck.CheckDir }
