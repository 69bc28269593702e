// Package encode turns Alpaca records into the token ids a model trains on,
// as the seed workloads' tokenizer(text, truncation=True, max_length=L) does:
// it formats each record with a dataset.Template, tokenizes the text with a
// tokenize.Tokenizer (the ids HF tokenizers gives), marks the prompt, and
// fits the ids into L by truncation or by splitting.
//
// One record becomes one example, or several with SplitLong:
//
//	text    = Template(record, {bos}, {eos})      prompt = text before {output}
//	ids     = prefix + Encode(text) + suffix      prefix, suffix: the post-processor's
//	                                              special ids (AddSpecial; Llama-3: BOS)
//	Prompt  = len(prefix) + the longest common prefix of Encode(prompt) and Encode(text)
//	                                              (MaskPrompt; else 0)
//	len(ids) <= L           one example
//	len(ids) >  L           truncated: prefix + Encode(text)[:L-len(prefix)-len(suffix)] + suffix
//	                        (HF keeps the special ids), or with SplitLong pieces of L ids,
//	                        each its own example, Prompt carried over and clamped to the piece
//
// Encoding runs on a bounded pool of goroutines (Parallel) over fixed-size
// chunks of the input; results are joined in input order, so the output
// does not depend on the number of workers. Parallel is also the loop for
// the stages around encoding (decoding input lines, formatting output).
//
// An Encoder is immutable after New and safe for concurrent use. Slices it
// returns belong to the caller; examples of one chunk share one backing
// array, so appending to one may overwrite the next (their capacity is
// capped to prevent that by accident).
package encode
