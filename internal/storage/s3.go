package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config overrides the S3 settings taken from the environment (see the
// package documentation). Zero fields keep the environment's value.
// Its String and GoString forms never show the secret key or the token.
type S3Config struct {
	// Endpoint is the server URL, e.g. "http://127.0.0.1:7070" or
	// "https://s3.example.com"; the scheme selects TLS. Default:
	// $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, else AWS.
	Endpoint string
	// Region; default $AWS_REGION, $AWS_DEFAULT_REGION, else "us-east-1"
	// for custom endpoints (AWS looks the bucket's region up).
	Region string
	// Static credentials; when AccessKeyID is empty the credential chain
	// (environment, shared credentials file with Profile, instance role)
	// is used.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Profile of the shared credentials file; default $AWS_PROFILE, else
	// "default".
	Profile string
	// PathStyle forces path-style requests (http://host/bucket/key).
	// Endpoints that are IP addresses or localhost always use them.
	PathStyle bool
	// MaxRetries is how often one request is tried (default 10, with
	// jittered back-off capped at 1 s). 1 disables retries.
	MaxRetries int
}

// String shows the settings without secrets.
func (c S3Config) String() string {
	secret := ""
	if c.SecretAccessKey != "" {
		secret = "<redacted>"
	}
	token := ""
	if c.SessionToken != "" {
		token = "<redacted>"
	}
	return fmt.Sprintf("S3Config{Endpoint:%q Region:%q AccessKeyID:%q SecretAccessKey:%q SessionToken:%q Profile:%q PathStyle:%v MaxRetries:%d}",
		c.Endpoint, c.Region, c.AccessKeyID, secret, token, c.Profile, c.PathStyle, c.MaxRetries)
}

// GoString is String, so that %#v does not print secrets either.
func (c S3Config) GoString() string { return c.String() }

// resolve fills the zero fields of c from the environment.
func (c S3Config) resolve() S3Config {
	env := func(names ...string) string {
		for _, n := range names {
			if v := os.Getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	if c.Endpoint == "" {
		c.Endpoint = env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if c.Region == "" {
		c.Region = env("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	if c.Profile == "" {
		c.Profile = env("AWS_PROFILE")
	}
	return c
}

type s3Client struct {
	core     minio.Core
	endpoint string // host[:port], for messages
	keyID    string // access key ID in use, for messages (never the secret)
}

var (
	clientsMu sync.Mutex
	clients   = map[string]*s3Client{}
)

// clientFor returns a cached client for the resolved configuration. The
// cache key includes the credential environment, so a test (or a command)
// that changes it gets a new client.
func clientFor(cfg *config) (*s3Client, error) {
	var c S3Config
	if cfg.s3 != nil {
		c = *cfg.s3
	}
	c = c.resolve()
	h := sha256.New()
	for _, s := range []string{c.Endpoint, c.Region, c.AccessKeyID, c.SecretAccessKey, c.SessionToken, c.Profile,
		fmt.Sprint(c.PathStyle, c.MaxRetries),
		os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"),
		os.Getenv("AWS_SHARED_CREDENTIALS_FILE"), os.Getenv("AWS_CONFIG_FILE")} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	key := hex.EncodeToString(h.Sum(nil))
	clientsMu.Lock()
	defer clientsMu.Unlock()
	if cl, ok := clients[key]; ok {
		return cl, nil
	}
	cl, err := newS3Client(c)
	if err != nil {
		return nil, err
	}
	clients[key] = cl
	return cl, nil
}

func newS3Client(c S3Config) (*s3Client, error) {
	host, secure := "s3.amazonaws.com", true
	custom := c.Endpoint != ""
	if custom {
		u, err := url.Parse(c.Endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("%w: S3 endpoint %q: want http://host[:port] or https://host[:port]", ErrBadOption, c.Endpoint)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("%w: S3 endpoint %q: a path is not supported", ErrBadOption, c.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	region := c.Region
	if region == "" && custom {
		region = "us-east-1"
	}
	var creds *credentials.Credentials
	keyID := c.AccessKeyID
	if c.AccessKeyID != "" {
		creds = credentials.NewStaticV4(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	} else {
		keyID = os.Getenv("AWS_ACCESS_KEY_ID")
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{Profile: c.Profile},
			&credentials.IAM{},
		})
	}
	lookup := minio.BucketLookupAuto
	if c.PathStyle || isLocalHost(host) {
		lookup = minio.BucketLookupPath
	}
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("storage: S3 transport: %w", err)
	}
	tr.MaxIdleConnsPerHost = 256
	mc, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Region:       region,
		BucketLookup: lookup,
		Transport:    tr,
		MaxRetries:   c.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("storage: S3 client for %s: %w", host, err)
	}
	return &s3Client{core: minio.Core{Client: mc}, endpoint: host, keyID: keyID}, nil
}

// isLocalHost reports whether host (with optional port) is an IP address or
// localhost: such endpoints cannot do virtual-host-style bucket names.
func isLocalHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	return host == "localhost" || strings.HasSuffix(host, ".localhost") || net.ParseIP(host) != nil
}

// parseS3 splits s3://bucket/key. needKey requires a non-empty key.
func parseS3(loc string, needKey bool) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(loc, "s3://")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not an s3:// URL", ErrBadLocation, loc)
	}
	bucket, key, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%w: %q has no bucket (want s3://bucket/key)", ErrBadLocation, loc)
	}
	if needKey && (key == "" || strings.HasSuffix(key, "/")) {
		return "", "", fmt.Errorf("%w: %q has no object key (want s3://bucket/key)", ErrBadLocation, loc)
	}
	return bucket, key, nil
}

// s3Error turns a minio-go error into one that names the operation and the
// location, matches fs.ErrNotExist, fs.ErrExist, ErrAccessDenied or the
// context's error with errors.Is, and never contains a secret.
func (cl *s3Client) s3Error(ctx context.Context, op, loc string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("storage: %s %s: %w", op, loc, cerr)
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchBucket":
		return fmt.Errorf("storage: %s %s: bucket %q does not exist (endpoint %s): %w", op, loc, resp.BucketName, cl.endpoint, fs.ErrNotExist)
	case resp.Code == "InvalidAccessKeyId" || resp.Code == "XAdminUserNotFound" || resp.Code == "SignatureDoesNotMatch" || resp.Code == "AccessDenied" ||
		resp.Code == "ExpiredToken" || resp.Code == "InvalidToken" || resp.StatusCode == 403:
		who := cl.keyID
		if v, err := cl.core.GetCreds(); err == nil && v.AccessKeyID != "" {
			who = v.AccessKeyID // the one the credential chain found
		}
		if who == "" {
			who = "(none found: anonymous)"
		}
		hint := ""
		switch resp.Code {
		case "InvalidAccessKeyId", "XAdminUserNotFound":
			hint = "; the server does not know this access key ID (check AWS_ACCESS_KEY_ID / AWS_PROFILE)"
		case "SignatureDoesNotMatch":
			hint = "; the secret key does not match the access key ID (check AWS_SECRET_ACCESS_KEY / AWS_PROFILE)"
		case "ExpiredToken", "InvalidToken":
			hint = "; the session token is expired or invalid (check AWS_SESSION_TOKEN)"
		}
		return fmt.Errorf("storage: %s %s: %s (%s) at %s with access key ID %q%s: %w",
			op, loc, redact(resp.Message), resp.Code, cl.endpoint, who, hint, ErrAccessDenied)
	case resp.Code == "NoSuchKey" || resp.Code == "NotFound" || (resp.Code == "" && resp.StatusCode == 404):
		return fmt.Errorf("storage: %s %s: %w", op, loc, fs.ErrNotExist)
	case resp.Code == "NoSuchUpload":
		return fmt.Errorf("storage: %s %s: multipart upload vanished (aborted by another process or a lifecycle rule): %w", op, loc, fs.ErrNotExist)
	case resp.Code == "PreconditionFailed" || resp.StatusCode == 412:
		return fmt.Errorf("storage: %s %s: %w", op, loc, fs.ErrExist)
	case resp.Code != "":
		return fmt.Errorf("storage: %s %s: %s (%s, HTTP %d, endpoint %s)", op, loc, redact(resp.Message), resp.Code, resp.StatusCode, cl.endpoint)
	}
	return fmt.Errorf("storage: %s %s: %w", op, loc, scrub(err))
}

// headError maps the error of a HEAD request (StatObject), which has no
// body: some servers answer 404 to a HEAD with an unknown access key, and a
// missing bucket looks like a missing key. For a not-found answer one GET
// (a list of at most one key) tells a missing key, a missing bucket and bad
// credentials apart.
func (cl *s3Client) headError(ctx context.Context, op, loc, bucket, key string, err error) error {
	serr := cl.s3Error(ctx, op, loc, err)
	if !errors.Is(serr, fs.ErrNotExist) {
		return serr
	}
	if _, lerr := cl.core.ListObjectsV2(bucket, key, "", "", "/", 1); lerr != nil {
		if lserr := cl.s3Error(ctx, op, loc, lerr); lserr != nil {
			return lserr
		}
	}
	return serr
}

// redact removes anything that looks like a secret the process knows from
// a server-provided message.
func redact(msg string) string {
	for _, name := range []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		if v := os.Getenv(name); len(v) >= 4 {
			msg = strings.ReplaceAll(msg, v, "<redacted>")
		}
	}
	return msg
}

// scrubbed is err with a redacted message; errors.Is still sees through it.
type scrubbed struct{ err error }

func (s scrubbed) Error() string { return redact(s.err.Error()) }
func (s scrubbed) Unwrap() error { return s.err }

func scrub(err error) error {
	if err == nil {
		return nil
	}
	return scrubbed{err}
}

func statS3(ctx context.Context, loc string, cfg *config) (Info, error) {
	bucket, key, err := parseS3(loc, true)
	if err != nil {
		return Info{}, err
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return Info{}, err
	}
	oi, err := cl.core.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return Info{}, cl.headError(ctx, "stat", loc, bucket, key, err)
	}
	return Info{Loc: loc, Size: oi.Size, ModTime: oi.LastModified}, nil
}

// listS3 lists the objects under prefix, read as a directory: s3://b/out
// lists out/..., not outx.
func listS3(ctx context.Context, prefix string, cfg *config) ([]Info, error) {
	bucket, key, err := parseS3(prefix, false)
	if err != nil {
		return nil, err
	}
	if key != "" && !strings.HasSuffix(key, "/") {
		key += "/"
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []Info
	for oi := range cl.core.Client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: key, Recursive: true}) {
		if oi.Err != nil {
			return nil, cl.s3Error(ctx, "list", prefix, oi.Err)
		}
		if strings.HasSuffix(oi.Key, "/") {
			continue // a "directory marker" object
		}
		out = append(out, Info{Loc: "s3://" + bucket + "/" + oi.Key, Size: oi.Size, ModTime: oi.LastModified})
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: list %s: %w", prefix, err)
	}
	return out, nil
}

func removeS3(ctx context.Context, loc string, cfg *config) error {
	bucket, key, err := parseS3(loc, true)
	if err != nil {
		return err
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return err
	}
	// DeleteObject succeeds for missing keys; report them as the local
	// file system would.
	if _, err := cl.core.StatObject(ctx, bucket, key, minio.StatObjectOptions{}); err != nil {
		return cl.headError(ctx, "remove", loc, bucket, key, err)
	}
	if err := cl.core.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return cl.s3Error(ctx, "remove", loc, err)
	}
	return nil
}

// AbortIncompleteUploads aborts the S3 multipart uploads under prefix
// (s3://bucket/keyprefix) started before olderThan ago, and returns how
// many it aborted. Writers abort their own uploads; this cleans up after
// processes that were killed, or whose server went away before the abort
// could be sent. (A bucket lifecycle rule AbortIncompleteMultipartUpload
// does the same on AWS.) Uploads of other writers still running are
// younger than any sensible olderThan; olderThan 0 aborts them too.
func AbortIncompleteUploads(ctx context.Context, prefix string, olderThan time.Duration, opts ...Option) (int, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return 0, err
	}
	bucket, key, err := parseS3(prefix, false)
	if err != nil {
		return 0, err
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Add(-olderThan)
	n := 0
	keyMarker, idMarker := "", ""
	for {
		res, err := cl.core.ListMultipartUploads(ctx, bucket, key, keyMarker, idMarker, "", 1000)
		if err != nil {
			return n, cl.s3Error(ctx, "list uploads", prefix, err)
		}
		for _, u := range res.Uploads {
			if olderThan > 0 && u.Initiated.After(cutoff) {
				continue
			}
			if err := cl.core.AbortMultipartUpload(ctx, bucket, u.Key, u.UploadID); err != nil {
				if errors.Is(cl.s3Error(ctx, "", "", err), fs.ErrNotExist) {
					continue // finished or aborted meanwhile
				}
				return n, cl.s3Error(ctx, "abort upload", "s3://"+bucket+"/"+u.Key, err)
			}
			n++
		}
		if !res.IsTruncated {
			return n, nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}
