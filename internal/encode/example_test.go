package encode_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/tokenize"
)

func Example() {
	tok, err := tokenize.Load("../../testdata/tokenizers/llama3.1")
	if err != nil {
		log.Fatal(err)
	}
	e, err := encode.New(tok, encode.Config{EOS: "<|eot_id|>", AddSpecial: true, MaxLen: 16, MaskPrompt: true})
	if err != nil {
		log.Fatal(err)
	}
	recs := []dataset.Record{{Instruction: "Say hi", Output: "hi"}}
	exs, st, err := e.EncodeRecords(context.Background(), recs, nil, 1, nil)
	if err != nil {
		log.Fatal(err)
	}
	ex := exs[0]
	fmt.Printf("%d ids, %d of prompt, %d truncated\n", len(ex.Tokens), ex.Prompt, st.Truncated)
	fmt.Printf("%q\n", tok.Decode(ex.Tokens[ex.Prompt:], false))
	// Output:
	// 12 ids, 10 of prompt, 0 truncated
	// "hi<|eot_id|>"
}
