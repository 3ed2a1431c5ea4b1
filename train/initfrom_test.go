package train

import (
	"strings"
	"testing"
)

const hfTiny = "../testdata/hf_gpt2_tiny.safetensors" // 2 layers, 32 wide, block 16

// TestInitFromGivenShape: --init-from's file replaces the model settings
// left at their defaults, keeps given ones that agree with it, and refuses
// given ones that disagree, naming each with both values.
func TestInitFromGivenShape(t *testing.T) {
	base := Default()
	base.InitFrom, base.NHead = hfTiny, 2
	fileBias := func() bool {
		c := base
		if _, err := initFrom(&c); err != nil {
			t.Fatal(err)
		}
		if c.NLayer != 2 || c.NEmbd != 32 || c.BlockSize != 16 {
			t.Fatalf("the defaults were not replaced by the file's shape: %d layers, %d wide, block %d", c.NLayer, c.NEmbd, c.BlockSize)
		}
		return c.Bias
	}()

	agree := base
	agree.NLayer, agree.NEmbd, agree.BlockSize, agree.Bias = 2, 32, 16, fileBias
	agree.Given = []string{"NLayer", "NEmbd", "BlockSize", "Bias", "NHead"}
	if _, err := initFrom(&agree); err != nil {
		t.Errorf("given settings that agree with the file: %v", err)
	}

	one := base
	one.NEmbd, one.Given = 64, []string{"NEmbd"}
	_, err := initFrom(&one)
	if want := "NEmbd 64 disagrees with InitFrom " + hfTiny + ", whose model has NEmbd 32"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a given width the file does not have: %v, want %q", err, want)
	}

	llama := base
	llama.Arch, llama.Given = "llama", []string{"Arch"}
	_, err = initFrom(&llama)
	if want := "Arch llama disagrees with InitFrom " + hfTiny + ", whose model has Arch gpt2"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--arch llama with a GPT-2 file: %v, want %q", err, want)
	}
	gpt2 := base
	gpt2.Arch, gpt2.Given = "gpt2", []string{"Arch"}
	if _, err := initFrom(&gpt2); err != nil {
		t.Errorf("--arch gpt2 with a GPT-2 file: %v", err)
	}

	all := base
	all.NLayer, all.NEmbd, all.BlockSize, all.Bias = 3, 64, 8, !fileBias
	all.Given = []string{"NLayer", "NEmbd", "BlockSize", "Bias"}
	_, err = initFrom(&all)
	for _, want := range []string{"NLayer 3, NEmbd 64, BlockSize 8, Bias ", " disagree with InitFrom ",
		"whose model has NLayer 2, NEmbd 32, BlockSize 16, Bias ", "leave them out"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("four given settings the file disagrees with: %v, want %q", err, want)
		}
	}
}
