package chattemplate_test

import (
	"fmt"
	"time"

	"github.com/ferryml/ferry/chattemplate"
)

func Example() {
	tmpl, err := chattemplate.Parse("chatml", `{% for m in messages %}<|im_start|>{{ m.role }}
{% generation %}{{ m.content | trim }}<|im_end|>
{% endgeneration %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}{{ tools | tojson }}`)
	if err != nil {
		panic(err)
	}
	msgs, err := chattemplate.ParseJSONValue([]byte(`[{"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Hello", "tool_calls": null}]`))
	if err != nil {
		panic(err)
	}
	tools, _ := chattemplate.ParseJSONValue([]byte(`[{"b": 1.0, "a": "é"}]`))
	res, err := tmpl.Apply(chattemplate.Chat{Messages: msgs.(*chattemplate.List), Tools: tools, AddGenerationPrompt: true},
		map[string]string{"eos_token": "<|im_end|>"}, &chattemplate.Options{Now: time.Now})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s\n%v %q\n", res.Text, res.Generation, res.Text[res.Generation[1].Start:res.Generation[1].End])
	// Output:
	// <|im_start|>user
	// Hi<|im_end|>
	// <|im_start|>assistant
	// Hello<|im_end|>
	// <|im_start|>assistant
	// [{"b": 1.0, "a": "é"}]
	// [{17 30 17 30} {52 68 52 68}] "Hello<|im_end|>\n"
}
