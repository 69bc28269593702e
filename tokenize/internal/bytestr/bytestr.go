// Package bytestr views a byte slice as a string without copying, for the
// tokenizer's scratch buffers: the normalized text is written into a buffer
// that is reused from call to call, and read as a string.
//
// The caller must not write to b while the string is in use, nor keep the
// string (or a substring) past that. Built with the purego tag, String
// copies.
package bytestr
