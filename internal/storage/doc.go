// Package storage reads and writes whole objects on local disks, mounted
// volumes (FUSE, NFS) and S3-compatible object stores behind one small
// interface, and never leaves a half-written result.
//
// A location is a plain path or an s3://bucket/key URL, and this package
// is the only one that tells them apart (internal/layering checks that no
// other calls IsS3): callers ask locate.go's questions instead (LocalPath,
// Glob, ListNames, WriteFile, Fetch, Stage, RemoveMatching). Open gives random
// access (local: pread; S3: ranged GETs, split into parallel ranges for
// large reads); OpenStream gives one fast sequential read (S3: parallel
// ranged read-ahead). Create returns a Writer that receives bytes in
// order, never seeking, so the same code serves S3 and FUSE volumes that
// refuse random writes:
//
//	local path /d/name                     S3 s3://b/k
//	--------------------------------       -------------------------------------
//	create  /d/.name.ferry-tmp-<rand>      create  CreateMultipartUpload (lazily)
//	write   buffered, sequential           write   fill part buffer; full part ->
//	                                               UploadPart, <= parallelism in flight
//	commit  flush, fsync(tmp),             commit  CompleteMultipartUpload
//	        renameat2(tmp, name,                   (or one PutObject when the whole
//	        NOREPLACE unless overwrite),           object fits in one part), with
//	        fsync(/d)                              If-None-Match: * unless overwrite
//	abort   unlink tmp                     abort   AbortMultipartUpload
//
// Parts carry a CRC-32C (x-amz-checksum-crc32c) that the server checks,
// instead of a SHA-256 of the payload, which costs far more CPU.
//
// The local column is AtomicFile, the one atomic local write of ferry:
// the shard writer and the checkpoint merger's local outputs use it
// directly (positioned writes, a read-back check or O_DIRECT descriptors
// before Commit). Its fsyncs (SyncFile, SyncDir) treat a file system
// without fsync (EINVAL, ENOTSUP, ENOSYS: some FUSE and network mounts)
// as success.
//
// Until Commit returns nil nothing is visible at the location, and an
// existing object there is untouched. A failed Write aborts the writer at
// once; after the context is cancelled, uploads in flight stop and the
// next Write, Commit or Abort discards everything. A process killed with SIGKILL can
// leave a local temporary file (List skips them) or an incomplete S3
// multipart upload (invisible to readers; AbortIncompleteUploads removes
// them, as does a bucket lifecycle rule).
//
// Memory: an S3 Writer holds at most part size x (parallelism + 1) bytes
// (16 MiB x 5 by default); an S3 stream at most read chunk x (parallelism
// + 1) (8 MiB x 5); a Reader nothing beyond the caller's buffer.
//
// S3 is configured as AWS tools are: AWS_ENDPOINT_URL (http:// or https://;
// absent means AWS), AWS_REGION or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, the shared credentials file
// (AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE) and the EC2/ECS/EKS instance
// roles, in that order. Endpoints that are IP addresses or localhost use
// path-style addressing. WithS3Config overrides any of these. Secrets
// never appear in errors or in the String form of S3Config.
//
// Concurrency: package functions and Readers are safe for concurrent use;
// a Writer is not (one goroutine writes, but Abort may be deferred). Every
// call honours its context; a Reader uses the context given to Open.
package storage
