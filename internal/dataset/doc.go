// Package dataset reads Alpaca-style instruction records and formats them
// as training text with a template.
//
// Inputs (detected from content, never from the name): a JSON array of
// objects, JSON Lines (one object per line, also when named .json), or
// Parquet with string/large_string columns; each optionally gzip- or
// zstd-compressed; from a local path or s3:// (internal/storage). Records
// need string fields "instruction" and "output"; "input" is optional (absent,
// null and "" all mean no input, as the seeds' row.get("input") has it);
// other keys and columns are ignored.
//
// The JSON scanner is hand-written so that every problem names the file,
// the record index, its byte offset and line, and so that a bad record can
// be skipped and counted (Options.OnBad) instead of ending the run:
//
//	problem                               kind        skippable
//	malformed JSON in an array            ErrSyntax   no (rest of the input is lost)
//	malformed line in JSON Lines          ErrSyntax   yes (the line)
//	missing/null/non-string field         ErrField    yes
//	invalid UTF-8, unpaired \uD800        ErrUTF8     yes
//	raw control character in a string     ErrField    yes
//	empty input                           ErrEmpty    no
//
// The whole input is read into memory (bounded by Options.MaxBytes); Read
// is safe for concurrent use, a Template is immutable after parsing.
package dataset
