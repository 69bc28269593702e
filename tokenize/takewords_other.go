//go:build !amd64 || purego || noasm

package tokenize

// takeWords is takeWordsGo where there is no assembly version.
func takeWords(words *wordTable, text string, base, pos int, m, next uint64, out *[128]int32) (int, uint64, int, int) {
	return takeWordsGo(words, text, base, pos, m, next, out)
}
