//go:build !linux

package serve

import (
	"fmt"
	"runtime"
)

// checkOS reports whether this system has the transport's system calls:
// memfd, file seals and eventfd are Linux's.
func checkOS() error {
	return fmt.Errorf("%w (this is %s/%s)", ErrUnsupported, runtime.GOOS, runtime.GOARCH)
}
