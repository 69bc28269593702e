// Package s3server starts a real S3 server (versitygw, POSIX back end) on
// 127.0.0.1 for tests, so that S3 code paths run against the protocol as a
// server implements it rather than against a fake.
//
// versitygw is looked up on PATH and in $(go env GOPATH)/bin; install it
// with
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// (scripts/setup-test-deps does). When it is missing, Start fails the test
// if FERRY_REQUIRE_TOOLS=1 (as `make test` sets) and skips it otherwise.
//
// A Server belongs to one test: Start registers its shutdown with
// t.Cleanup (Launch starts one outside tests, for benchmarks). Methods are safe for concurrent use except Kill and Restart.
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Server is a running versitygw.
type Server struct {
	Endpoint  string // http://127.0.0.1:PORT
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the POSIX back end: one directory per bucket

	bin  string
	addr string // 127.0.0.1:PORT
	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *lockedWriter
	done chan struct{}
}

// Binary returns the path of versitygw, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "versitygw")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// Start starts versitygw on a free port of 127.0.0.1 with a fresh data
// directory and random root credentials, and waits until it answers.
func Start(t testing.TB) *Server {
	t.Helper()
	if Binary() == "" {
		msg := "versitygw not found on PATH or in $(go env GOPATH)/bin; install it with: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 (or run scripts/setup-test-deps)"
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatalf("s3server: %s", msg)
		}
		t.Skipf("s3server: %s; skipped (set FERRY_REQUIRE_TOOLS=1 to fail instead)", msg)
	}
	s, err := Launch(t.TempDir())
	if err != nil {
		t.Fatalf("s3server: %v", err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Launch starts versitygw outside a test (benchmarks), keeping its data in
// dir. The caller stops it with Kill.
func Launch(dir string) (*Server, error) {
	bin := Binary()
	if bin == "" {
		return nil, fmt.Errorf("versitygw not found on PATH or in $(go env GOPATH)/bin; install it with: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0")
	}
	s := &Server{
		AccessKey: "ferrytest" + randHex(4),
		SecretKey: randHex(20),
		Region:    "us-east-1",
		Dir:       dir,
		bin:       bin,
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.addr, err = freeAddr()
		if err != nil {
			continue
		}
		s.Endpoint = "http://" + s.addr
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	return nil, err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--port", s.addr, "--quiet", "posix", s.Dir)
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID=", "ROOT_SECRET_ACCESS_KEY=")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(15 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-done:
			return fmt.Errorf("versitygw on %s exited at start: %s", s.addr, out.String())
		default:
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			return fmt.Errorf("versitygw on %s not ready after 15 s: %v: %s", s.addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd, s.out, s.done = cmd, out, done
	return nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

// Kill stops the server at once with SIGKILL, as a crash would; its data
// stays for Restart. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts a killed server again on the same address with the same
// data and credentials.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond) // the port may linger briefly
	}
	t.Fatalf("s3server: restart: %v", err)
}

// Client returns a minio-go client for the server with its root credentials.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := s.NewClient()
	if err != nil {
		t.Fatalf("s3server: client: %v", err)
	}
	return c
}

// NewClient is Client for use outside tests.
func (s *Server) NewClient() (*minio.Client, error) {
	return minio.New(s.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
	})
}

// Bucket creates a bucket and returns its URL, "s3://name".
func (s *Server) Bucket(t testing.TB, name string) string {
	t.Helper()
	if err := s.Client(t).MakeBucket(context.Background(), name, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("s3server: create bucket %q: %v", name, err)
	}
	return "s3://" + name
}

// Env returns the AWS_* variables that point an AWS-configured program
// (ferry's commands, the AWS CLI, boto3) at the server, for a
// subprocess's environment: append them to os.Environ().
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
	}
}

// SetEnv sets Env's variables in this process for the rest of the test
// (with t.Setenv, so not in parallel tests).
func (s *Server) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Log returns what the server printed so far, for failure messages.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}
