package storage

import (
	"strings"
	"testing"
)

// FuzzJoinS3 checks that joining untrusted path elements to an s3:// URL
// never leaves the bucket and always gives a location parseS3 accepts.
func FuzzJoinS3(f *testing.F) {
	f.Add("s3://bucket/prefix", "a/b", "../c")
	f.Add("s3://b", "../../..", "x")
	f.Add("s3://b/k/", "./", "")
	f.Fuzz(func(t *testing.T, base, e1, e2 string) {
		if !strings.HasPrefix(base, "s3://") {
			base = "s3://" + base
		}
		bucket, _, err := parseS3(base, false)
		if err != nil {
			return
		}
		got := Join(base, e1, e2)
		gb, key, err := parseS3(got, false)
		if err != nil {
			t.Fatalf("Join(%q, %q, %q) = %q: %v", base, e1, e2, got, err)
		}
		if gb != bucket {
			t.Fatalf("Join(%q, %q, %q) = %q: left bucket %q", base, e1, e2, got, bucket)
		}
		for _, p := range strings.Split(key, "/") {
			if p == ".." || p == "." || (p == "" && key != "") {
				t.Fatalf("Join(%q, %q, %q) = %q: uncleaned key", base, e1, e2, got)
			}
		}
	})
}
