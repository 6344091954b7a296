package extract

import (
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "print(1)", "print(1)"},
		{"python fence", "```python\nprint(1)\n```", "print(1)"},
		{"py fence", "```py\nx = 2\nprint(x)\n```", "x = 2\nprint(x)"},
		{"bare fence", "```\nprint(3)\n```", "print(3)"},
		{"fence with prose", "Here is the code:\n```python\nprint('hi')\n```\nIt prints hi.", "print('hi')"},
		{"first of two fences", "```python\na = 1\n```\nthen\n```python\nb = 2\n```", "a = 1"},
		{"unclosed fence", "```python\nprint(1)", "print(1)"},
		{"dict single quotes", "{'generated_code': 'print(\"x\")\\nprint(2)'}", "print(\"x\")\nprint(2)"},
		{"dict double quotes", `{"generated_code": "import math\nprint(math.pi)"}`, "import math\nprint(math.pi)"},
		{"dict triple quotes", "{'generated_code': '''a = 1\nprint(a)'''}", "a = 1\nprint(a)"},
		{"dict with fence inside", "{'generated_code': '```python\\nprint(5)\\n```'}", "print(5)"},
		{"dict escapes", `{'generated_code': 'print(\'it\\\'s\')\t# \x41\u00e9'}`, "print('it\\'s')\t# A\u00e9"},
		{"dict not code", "{'a': 1}", "{'a': 1}"},
		{"code that is a set literal", "{1, 2}", "{1, 2}"},
		{"unterminated dict string", "{'generated_code': 'print(1)}", "{'generated_code': 'print(1)}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Code(tt.in); got != tt.want {
				t.Errorf("Code(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzCode(f *testing.F) {
	for _, s := range []string{"print(1)", "```python\nx\n```", "{'generated_code': 'a\\nb'}", `{"generated_code": "\u00e9"}`, "{'generated_code': r'\\d'}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Code(in)
		// Extraction only ever removes wrapping: a result longer than the
		// input would mean we invented code.
		if len(out) > len(in)*4+4 {
			t.Fatalf("Code grew %d bytes into %d", len(in), len(out))
		}
		if !strings.Contains(in, "generated_code") && !strings.Contains(in, "```") && out != in {
			t.Fatalf("text without wrapping changed: %q -> %q", in, out)
		}
	})
}
