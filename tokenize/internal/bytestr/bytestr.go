// Package bytestr views a byte slice as a string without copying, for the
// tokenizer's scratch buffers: the normalized text is written into a buffer
// that is reused from call to call, and read as a string.
//
// The caller must not write to b while the string is in use, nor keep the
// string (or a substring) past that. Built with the purego tag, String
// copies.
//
// Load64 reads 8 bytes of a string without bounds checks, for the encode
// loop's inner loop, which checks once per 64-byte block that its reads are
// inside the text. Built with the purego or noasm tag, it checks them (make
// test's noasm lane runs that loop's tests so).
package bytestr
