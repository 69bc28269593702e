//go:build !amd64 || purego || noasm

package tokenize

// takeWords is takeWordsGo where there is no assembly version.
func takeWords(words *wordTable, text string, base, pos int, m, u uint64, run [][2]uint64, last uint64, out []int32) (int, uint64, int, int) {
	return takeWordsGo(words, text, base, pos, m, u, run, last, out)
}

// overreads is false: takeWordsGo reads within the text.
func overreads(string) bool { return false }

// readsPast is false: takeWords reads within the text.
const readsPast = false
