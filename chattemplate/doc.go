// Package chattemplate renders Hugging Face chat templates (Jinja) to the
// same bytes as transformers' apply_chat_template(tokenize=False), and
// records {% generation %} blocks as byte spans of the output.
//
// It is a small Jinja engine of its own, scoped to what chat templates
// use, with the semantics transformers sets up: jinja2's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
// loop-controls extension; tojson as json.dumps(ensure_ascii=False) keeping
// insertion order; raise_exception; strftime_now from an injected clock;
// and Python's value semantics (how None, booleans, floats, lists and dicts
// print, true division, floor division and modulo, code-point indexing and
// slicing, str methods, undefined values). What it does not implement
// fails with ErrUnsupported naming the construct and the template line; it
// never renders something else.
//
// # Use
//
//	t, special, err := chattemplate.FromTokenizerDir(dir, "")
//	msgs, err := chattemplate.ParseJSONValue(jsonMessages) // keeps key order
//	res, err := t.Apply(chattemplate.Chat{Messages: msgs.(*chattemplate.List)}, special, nil)
//	// res.Text; res.Generation: the {% generation %} spans
//
// Apply normalizes the messages as transformers 5.24 does (NormalizeMessages:
// null-valued keys dropped, reasoning fields aliased) and passes tools=None
// and documents=None when absent, as transformers does (so "tools is
// defined" is true). ShareGPT maps from/value turns to messages. Reading
// dataset records into a Chat (messages, ShareGPT conversations, tools as a
// list or a JSON string, chat_template_kwargs, text-only content) is
// internal/dataset's ReadChat, the one reader dataprep uses. Chat.Unnormalized
// renders as transformers 4.x does, which hands the messages over unchanged.
//
// Generation spans are byte offsets into Result.Text (Start, End) and the
// same in code points (CharStart, CharEnd), which is what transformers'
// return_assistant_tokens_mask records. A block inside a macro, set block
// or filter block is recorded as transformers records it, at the length of
// the top-level output so far.
//
// Names are scoped as jinja2 compiles them (scope.go): a name a frame (the
// template, a loop body, a macro, a block) assigns without reading it
// first starts that frame undefined, even when the render's variables
// have it, and inner frames see it so until the assignment runs.
//
// # Concurrency and lifetimes
//
// A Template is immutable after Parse: any number of goroutines may render
// it at once. Values passed to Render are only read. Result.Text is a new
// string.
//
// # Limits
//
// A template is untrusted input. Parse bounds the nesting of blocks and
// expressions (200). Render bounds the output and every string the
// template builds (Options.MaxOutput, default 64 MiB), the statements,
// loop iterations and calls executed (MaxSteps, default 10M), and macro
// recursion (MaxDepth, default 100); range() is capped at 100,000 items as
// in jinja2's sandbox. Values nest at most 512 deep. Past a bound, Render
// fails with ErrLimit naming the template line. There is no file, network
// or environment access from a template. FromTokenizerDir reads files of
// at most 16 MiB.
//
// # Implemented
//
// Statements: if/elif/else, for (tuple targets, "if" filter, else, loop.index,
// index0, revindex, revindex0, first, last, length, previtem, nextitem,
// depth, cycle), break, continue, set (names, tuples, namespace
// attributes), set blocks with filters, macro (defaults, varargs, kwargs,
// caller), call blocks, filter blocks, with, raw, generation, comments and
// whitespace control (-, +, trim_blocks, lstrip_blocks).
//
// Expressions: literals (str with Python escapes, int, float, list, tuple,
// dict), attribute and item lookup (jinja2's getattr-first: message.items
// is the dict method), slices, calls with keyword arguments, filters,
// tests, not/and/or, comparisons (chained), in/not in, + - * / // % ** ~,
// unary - +, inline if/else, "%" string formatting (%s %r %d %i %f).
//
// Filters: abs attr capitalize center count d default dictsort e escape
// first float format indent int items join last length list lower map max
// min reject rejectattr replace reverse round (precision 0) safe select
// selectattr sort string sum title tojson trim unique upper.
//
// Tests: boolean callable defined divisibleby eq equalto escaped even false
// filter float ge gt greaterthan in integer iterable le lessthan lower lt
// mapping ne none number odd sameas sequence string test true undefined
// upper == != < <= > >=.
//
// Globals: range namespace dict raise_exception strftime_now.
//
// Methods: str strip lstrip rstrip split rsplit splitlines startswith
// endswith (str or tuple) replace upper lower title capitalize find rfind
// index rindex count join is* removeprefix removesuffix partition
// rpartition center ljust rjust zfill format (plain {} {0} {name} fields);
// dict items keys values get copy; list index count copy.
//
// # How it is checked
//
// The tests compare with transformers 5.24.0 (Jinja2 3.1.6), whose output
// is stored in testdata/chattemplate (scripts/gen-chattemplate-goldens.py
// regenerates it): the 12 tokenizer families' and TRL's 53 chat templates
// over 194 conversations (12,610 renders: text, generation spans, and the
// error message where transformers fails), 3,000 random templates and
// expressions, and about 90 hand-written cases.
//
// # Known differences
//
// Not implemented (ErrUnsupported): continue_final_message (a caller can
// render and cut, as transformers does), tools given as Python callables,
// recursive for loops, extends, include,
// import, block, *args/**kwargs in calls, tuple subscripts, the filters
// batch slice groupby truncate wordwrap wordcount striptags urlize urlencode
// pprint xmlattr filesizeformat forceescape random, round with a precision,
// str.format with a conversion or format spec, % formats other than
// %s %r %d %i %f %.Nf, casefold, the globals lipsum cycler joiner,
// loop.changed, printing a generator (map/select/... without |list) or a
// method, integers beyond 64 bits, strftime directives other than
// a A b B d e F H I j m M p S T y Y and the "-" flag.
// Error messages are Python's where the tests compare them (every golden
// and random case); syntax errors are worded differently.
// A macro called with more positional arguments than parameters puts them in
// varargs even when the body does not use it (jinja2 raises). jinja2 checks
// filter and test names when compiling; this package when the filter runs.
// Markup (from |safe or |e) is kept through "+" (which escapes a plain str
// operand, as Python does), "~" and output; other operations treat it as a
// plain str.
package chattemplate
