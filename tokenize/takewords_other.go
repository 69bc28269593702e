//go:build !amd64 || purego || noasm

package tokenize

// takeWords is takeWordsGo where there is no assembly version.
func takeWords(words *wordTable, text string, pos int, m uint64, out *[64]int32) (int, uint64, int) {
	return takeWordsGo(words, text, pos, m, out)
}
