package storage

import (
	"context"
	"errors"
	"io"
)

var errS3NotYet = errors.New("storage: s3 support is being written")

// S3Config holds S3 settings; see WithS3Config.
type S3Config struct {
	Endpoint, Region, AccessKeyID, SecretAccessKey, SessionToken, Profile string
}

func openS3(ctx context.Context, loc string, cfg *config) (Reader, error) { return nil, errS3NotYet }
func openS3Stream(ctx context.Context, loc string, cfg *config) (io.ReadCloser, int64, error) {
	return nil, 0, errS3NotYet
}
func createS3(ctx context.Context, loc string, cfg *config) (Writer, error) { return nil, errS3NotYet }
func statS3(ctx context.Context, loc string, cfg *config) (Info, error)     { return Info{}, errS3NotYet }
func listS3(ctx context.Context, loc string, cfg *config) ([]Info, error)   { return nil, errS3NotYet }
func removeS3(ctx context.Context, loc string, cfg *config) error           { return errS3NotYet }
