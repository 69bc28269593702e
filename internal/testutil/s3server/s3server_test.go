package s3server

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
)

func TestStartBucketKillRestart(t *testing.T) {
	s := Start(t)
	b := s.Bucket(t, "ferry-s3server")
	if b != "s3://ferry-s3server" {
		t.Fatalf("Bucket = %q", b)
	}
	ctx := context.Background()
	c := s.Client(t)
	data := []byte("survives a restart")
	if _, err := c.PutObject(ctx, "ferry-s3server", "k", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if _, err := c.StatObject(ctx, "ferry-s3server", "k", minio.StatObjectOptions{}); err == nil {
		t.Fatal("server answers after Kill")
	}
	s.Restart(t)
	o, err := c.GetObject(ctx, "ferry-s3server", "k", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(o)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after restart: %q, %v\nserver log:\n%s", got, err, s.Log())
	}
	env := s.Env()
	if len(env) == 0 || env[0] != "AWS_ENDPOINT_URL="+s.Endpoint {
		t.Fatalf("Env = %q", env)
	}
}
