package storage

import (
	"fmt"
	"io/fs"
	"strings"
)

// Defaults of the tunable options.
const (
	// DefaultPartSize is the S3 multipart part size.
	DefaultPartSize = 16 << 20
	// DefaultReadChunk is the size of one ranged GET of OpenStream's
	// read-ahead and of a large ReadAt split into parallel GETs (measured
	// on loopback: 8 MiB ranges beat 16 MiB ones by ~1.4x).
	DefaultReadChunk = 8 << 20
	// DefaultParallelism is the number of S3 parts uploaded or ranges
	// fetched at once.
	DefaultParallelism = 4
	// MinPartSize and MaxPartSize are the S3 limits on a part (the last
	// part may be smaller than MinPartSize).
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
	// MaxParts is the S3 limit on the number of parts of one upload: an
	// object can be at most part size x MaxParts bytes.
	MaxParts = 10000
)

// Option configures one call. Options validate their argument and make the
// call fail with an error wrapping ErrBadOption when it is out of range.
type Option func(*config) error

type config struct {
	partSize    int64
	readChunk   int64
	parallelism int
	overwrite   bool
	perm        fs.FileMode
	tempMarker  string
	s3          *S3Config
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		partSize:    DefaultPartSize,
		readChunk:   DefaultReadChunk,
		parallelism: DefaultParallelism,
		perm:        0o644,
		tempMarker:  tempMarker,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithPartSize sets the S3 part size for uploads (default DefaultPartSize
// = 16 MiB) and the size of parallel ranged reads (default
// DefaultReadChunk = 8 MiB); between MinPartSize and MaxPartSize. A writer
// or a stream holds at most this size x (parallelism + 1) bytes in memory.
func WithPartSize(n int64) Option {
	return func(c *config) error {
		if n < MinPartSize || n > MaxPartSize {
			return fmt.Errorf("%w: part size %d, want %d..%d", ErrBadOption, n, MinPartSize, MaxPartSize)
		}
		c.partSize, c.readChunk = n, n
		return nil
	}
}

// WithParallelism sets how many S3 parts are uploaded, or ranges fetched,
// at once (default DefaultParallelism = 4; 1..256).
func WithParallelism(n int) Option {
	return func(c *config) error {
		if n < 1 || n > 256 {
			return fmt.Errorf("%w: parallelism %d, want 1..256", ErrBadOption, n)
		}
		c.parallelism = n
		return nil
	}
}

// WithOverwrite allows Create to replace an existing object (default
// false: Create and Commit fail with an error wrapping fs.ErrExist).
// The replacement is atomic: readers see the old or the new object, never
// a mix.
func WithOverwrite(ok bool) Option {
	return func(c *config) error {
		c.overwrite = ok
		return nil
	}
}

// WithPerm sets the permission bits of a new local file (default 0644,
// before the umask). Ignored for S3.
func WithPerm(perm fs.FileMode) Option {
	return func(c *config) error {
		if perm&^fs.ModePerm != 0 {
			return fmt.Errorf("%w: perm %v has non-permission bits", ErrBadOption, perm)
		}
		c.perm = perm
		return nil
	}
}

// WithTempMarker sets the string in the name of a local temporary file
// between the target's name and a random suffix (default ".ferry-tmp-";
// List skips names with the default). A caller that removes its own stale
// temporaries by name chooses its marker. It must be a plain name part:
// non-empty, without a path separator. Ignored for S3.
func WithTempMarker(marker string) Option {
	return func(c *config) error {
		if marker == "" || strings.ContainsAny(marker, `/\`) {
			return fmt.Errorf("%w: temp marker %q", ErrBadOption, marker)
		}
		c.tempMarker = marker
		return nil
	}
}

// WithS3Config overrides the S3 settings taken from the environment; zero
// fields of cfg keep the environment's value. Commands use it for flags
// such as --s3-endpoint.
func WithS3Config(cfg S3Config) Option {
	return func(c *config) error {
		cp := cfg
		c.s3 = &cp
		return nil
	}
}
