package tokenize_test

import (
	"fmt"
	"log"

	"github.com/ferryml/ferry/tokenize"
)

func Example() {
	tok, err := tokenize.Load("../testdata/tokenizers/llama3.1")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.Encode("Hello world<|eot_id|>", true)
	fmt.Println(ids)
	fmt.Printf("%q\n", tok.Decode(ids, true))
	sp := tok.Special()
	fmt.Println(sp.BOS, sp.BOSID, sp.EOS, sp.EOSID, sp.AddBOS)
	// Output:
	// [128000 9906 1917 128009]
	// "Hello world"
	// <|begin_of_text|> 128000 <|eot_id|> 128009 true
}
