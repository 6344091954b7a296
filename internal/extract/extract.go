// Package extract pulls the program out of what a language model wrote: a
// markdown fence with text around it, or a dict literal such as
// {'generated_code': '...'} that some clients send verbatim. NeMo Agent
// Toolkit's client strips fences badly, so the server does it instead.
package extract

import (
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// fence matches the first ```python, ```py or bare ``` block. The closing
// fence may be missing when the model was cut off.
var fence = regexp.MustCompile("(?s)```[ \t]*(python3?|py)?[ \t]*\r?\n(.*?)(?:\r?\n[ \t]*```|$)")

// dictKey finds the generated_code key of a dict literal and what follows.
var dictKey = regexp.MustCompile(`^\{\s*["']generated_code["']\s*:\s*`)

// Code returns the program in text.
func Code(text string) string {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
		if loc := dictKey.FindStringIndex(t); loc != nil {
			if s, ok := pyString(t[loc[1]:]); ok {
				return Code(s)
			}
		}
	}
	if m := fence.FindStringSubmatch(text); m != nil {
		return m[2]
	}
	return text
}

// pyString decodes the Python string literal at the start of s: '...',
// "...", or their triple-quoted forms, with an optional r prefix.
func pyString(s string) (string, bool) {
	raw := false
	if len(s) > 0 && (s[0] == 'r' || s[0] == 'R') {
		raw, s = true, s[1:]
	}
	if len(s) == 0 || (s[0] != '\'' && s[0] != '"') {
		return "", false
	}
	q := s[:1]
	if strings.HasPrefix(s, strings.Repeat(q, 3)) {
		q = strings.Repeat(q, 3)
	}
	body := s[len(q):]
	var b strings.Builder
	for i := 0; i < len(body); {
		if strings.HasPrefix(body[i:], q) {
			return b.String(), true
		}
		c := body[i]
		if len(q) == 1 && c == '\n' {
			return "", false
		}
		if c != '\\' || raw {
			if c == '\\' && i+1 < len(body) { // raw strings still keep \" from ending the string
				b.WriteString(body[i : i+2])
				i += 2
				continue
			}
			r, n := utf8.DecodeRuneInString(body[i:])
			b.WriteRune(r)
			i += n
			continue
		}
		if i+1 >= len(body) {
			return "", false
		}
		e := body[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n': // line continuation
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(body) {
				return "", false
			}
			v, err := strconv.ParseUint(body[i:i+n], 16, 32)
			if err != nil || v > utf8.MaxRune {
				return "", false
			}
			b.WriteRune(rune(v))
			i += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", false
}
