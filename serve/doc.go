// Package serve is ferry's per-node feed daemon (cmd/ferry-serve) and its
// shared-memory protocol: one daemon maps the shards of a dataprep output
// (fetching them from S3 first when needed) and every training process on
// the node receives its batches, prepared ahead of time, in a private ring of
// slots in shared memory. The trade-off against the direct loader
// (python/ferry/loader.py, which maps the shards itself): one process owns
// the page cache, the S3 fetch and the checks, and a client needs nothing but
// a socket path; the price is one copy of each row into the ring.
//
// # Life of a client
//
//	client                                         daemon
//	  connect(SOCK_SEQPACKET, path)  ───────────▶   accept
//	  HELLO{slots, max_rows, rank, worker} ─────▶   memfd_create + ftruncate + F_ADD_SEALS,
//	                                                 write the header page, 2 × eventfd()
//	  ◀── WELCOME{shm_size, info JSON} + SCM_RIGHTS[memfd, ready, free]
//	  mmap(memfd), check header + seals
//	  PLAN{runs…} (the batches, in order) ──────▶   for batch n = 0, 1, …:
//	                                                   wait until a slot is free (free eventfd),
//	                                                   copy its rows into slot n % slots,
//	                                                   write the slot header, ready += 1
//	  read ready (poll ready + socket)
//	  use slot n % slots (tensors are views of it)
//	  free += k (done with the k oldest batches) ─▶  those slots can be refilled
//	  … close / exit / crash  ──────────────────▶   EOF: unmap, close: the ring is freed
//
// The client decides the order (epoch, shuffle, resume, world size, workers:
// python/ferry/order.py) and sends it ahead as a plan; the daemon only
// gathers the rows it is told, in plan order, as fast as free slots allow.
// The ring starts with every slot free; the n-th increment of the ready
// eventfd means batch n is in slot n % slots. Python needs no atomics: a slot
// is written only between the client's free increment and the daemon's ready
// increment, both system calls (full barriers). Back-pressure is the ring
// itself: at most `slots` batches are filled ahead or held. Per batch the
// client makes about one system call (an eventfd read, skipped when several
// batches are already signalled; free increments are grouped), the daemon
// one copy of the rows and one eventfd write.
//
// Failure handling: a dead client is an EOF on its socket; the daemon unmaps
// and closes its ring at once, and the kernel frees the memory when the last
// mapping goes. A dead daemon is an EOF (POLLHUP) on the client's socket,
// which the client polls together with the ready eventfd, so it raises at
// once (ErrDaemonGone; Python: ferry.serve_client.DaemonGone); batches
// already filled stay readable. On SIGTERM the daemon sends every client
// MsgError with CodeShutdown, closes, removes its socket file and exits 0.
// Nothing is ever named in /dev/shm: a memfd lives only as long as a
// descriptor or a mapping of it, so no crash of either side leaves shared
// memory behind. A socket file left by a killed daemon is replaced by the
// next one (Listen checks that nobody answers on it).
//
// # Messages
//
// Unix SOCK_SEQPACKET: one message per datagram, little endian, at most
// MaxMsgSize (128 KiB) bytes. Every message starts with this header:
//
//	offset size field
//	     0    4 magic    "FRYS" (0x53595246)
//	     4    2 type     1 HELLO, 2 WELCOME, 3 PLAN, 4 ERROR
//	     6    2 flags    0
//	     8    4 length   payload bytes after the header (= datagram size − 16)
//	    12    4 reserved 0
//
// HELLO (client → daemon, first message; 24-byte payload):
//
//	offset size field
//	     0    4 version  1
//	     4    4 slots    ring size, 1..1024 (batches filled ahead + batches held)
//	     8    4 max_rows rows of the largest batch, 1..65536
//	    12    4 rank     int32, for the daemon's log (−1 unknown)
//	    16    4 worker   int32 DataLoader worker id, for the log (−1 none)
//	    20    4 flags    optional columns: 1 = source_ids (HelloSourceIDs);
//	                     other bits are refused
//
// WELCOME (daemon → client; with SCM_RIGHTS [memfd, ready eventfd, free eventfd]):
//
//	offset size field
//	     0    4 version  1
//	     4    4 reserved 0
//	     8    8 shm_size size of the memfd in bytes
//	    16    4 info_len bytes of info
//	    20    4 reserved 0
//	    24    n info     JSON: manifest.json without files[].batches and
//	                     template_text, plus "served_ranks": [ranks mapped]
//
// PLAN (client → daemon; 8 + 16·runs bytes, at most MaxRunsPerMsg runs):
// the next batches, appended to the client's plan. A batch is one run, or
// several runs when all but its last carry flag 1 (a batch may continue in
// the next PLAN). At most MaxPlanAhead PLAN messages may wait in the daemon.
//
//	offset size field
//	     0    4 runs     number of runs
//	     4    4 reserved 0
//	     8 16·r runs     r × {file uint32 (shard rank), row uint32 (first row in
//	                     that shard), rows uint32 (≥ 1), flags uint32 (1 = the
//	                     batch continues with the next run, else 0)}
//
// ERROR (daemon → client; the daemon closes the connection after it):
//
//	offset size field
//	     0    4 code     1 bad request, 2 shard not served, 3 over a limit,
//	                     4 daemon shutting down, 5 daemon I/O error
//	     4    4 reserved 0
//	     8    n text     UTF-8 message for the user
//
// Eventfds (8-byte little-endian counters): ready, written by the daemon, +1
// per filled batch; free, written by the client, +k when it is done with its
// k oldest batches (a client may never free more slots than it holds).
//
// # Shared memory
//
// The memfd (sealed F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL: its size never
// changes, so a mapping never faults) holds a 4096-byte header page followed
// by `slots` slots of slot_size bytes (a multiple of 4096):
//
//	offset size field
//	     0    8 magic        "FERRYSHM"
//	     8    4 version      1
//	    12    4 header_size  4096
//	    16    4 slots
//	    20    4 max_rows
//	    24    4 seq_len
//	    28    4 mode         0 pad, 1 pack
//	    32    8 slot_size
//	    40    8 slots_offset 4096 (slot i starts at 4096 + i·slot_size)
//	    48    8 total_size   = the memfd size
//	    56    8 reserved     0
//	    64  128 column table, 8 entries of 16 bytes, indexed by column id:
//	              +0 8 offset  of the column from the slot start (0 = absent)
//	              +8 1 dtype   1 int32, 2 int64
//	              +9 3 zero
//	             +12 4 width   elements per row (seq_len, or 1)
//	   192 3904 zero
//
// Column ids, each an array [max_rows, width] at a 64-byte aligned offset;
// only the first `rows` rows of a filled slot are meaningful:
//
//	id name            dtype width   present
//	 0 input_ids       int32 seq_len always
//	 1 labels          int32 seq_len always
//	 2 attention_mask  int32 seq_len pad mode (1 for j < length, else 0)
//	 3 position_ids    int32 seq_len pack mode
//	 4 length          int32 1       always: non-pad tokens of the row
//	 5 sample          int64 1       always: source record of the row's first segment
//	 6 source_ids      int32 seq_len HELLO flag 1: each token's source (its index
//	                                 in the manifest's sources; 0 in a version 1
//	                                 shard), −1 on padding
//	 7                 reserved (zero entry)
//
// Every slot starts with a 64-byte slot header, written by the daemon after
// the rows and before the eventfd increment:
//
//	offset size field
//	     0    8 seq    batch number n in the plan (the slot is n % slots)
//	     8    4 rows   rows in this batch
//	    12    4 state  0 empty/being filled, 1 filled
//	    16   48 reserved
//
// testdata/protocol.golden.json pins these numbers and example encodings;
// the Go tests and python/tests/e2e/test_serve.py both check their encoders
// against it.
//
// # Dataset
//
// This package holds no parser of the shard format: OpenDataset reads
// manifest.json with shard.DecodeManifest (which validates it whole, every
// batch and buffer offset included) and maps each served shard with
// shard.Manifest.OpenFile (size, SHA-256 with WithVerify, Arrow structure,
// the file against its manifest entry). It then indexes the validated
// buffers of every record batch (shard.Batch.Buffers), so that filling a
// slot is a few copies and no check. The shards of an s3:// dataset are
// fetched into the cache directory first, hashed while they stream in and
// named by their SHA-256; a cached copy is reused when it checks out.
//
// # Concurrency and limits
//
// A Server serves clients concurrently, one goroutine each; a Dataset is
// read-only after OpenDataset and shared by all of them. A Client is for one
// goroutine (Close may be called from another). The daemon bounds each ring
// (Config.MaxClientBytes, default 4 GiB), the number of clients
// (Config.MaxClients) and every count read from a message or header
// (MaxSlots, MaxRows, MaxMsgSize, MaxPlanAhead, every run against the
// served shards' row counts) before using it. Slices into a ring or a
// mapped shard are valid until the Client, Server or Dataset is closed.
//
// # Model files
//
// The same daemon serves the files of a Hugging Face model to
// ferry.load_pretrained (python/ferry/weights_client.py): a connection whose
// first message is MsgFile asks for byte ranges or whole files of a model
// directory (local, mounted or s3://, read through ckpt.SourceFor); a whole
// file is read once into a sealed memfd cached for Config.FileKeep after the
// last request, so the node's ranks read each byte from storage once and
// each copies its own shards' ranges out. Messages and limits: weights.go.
// Without Config.Data the daemon serves model files only.
//
// # Systems
//
// The transport (memfd, file seals, eventfd, SOCK_SEQPACKET) is Linux's.
// The package builds everywhere, but on other systems NewServer and Dial
// return an error wrapping ErrUnsupported; the direct loader needs none of
// it.
package serve
