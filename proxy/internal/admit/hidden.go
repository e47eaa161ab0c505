package admit

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"
)

// hiddenMarkers are the member names without which a body references no
// content it does not carry: a cheap test before the walk, on every turn.
var hiddenMarkers = [][]byte{
	[]byte(`"source"`), []byte(`"file_id"`), []byte(`"file_url"`), []byte(`"image_url"`),
	[]byte(`"container_upload"`), []byte(`"previous_response_id"`), []byte(`"conversation"`), []byte(`"fileData"`),
}

// maxHiddenDepth bounds the walk of a conversation's content.
const maxHiddenDepth = 12

// HiddenInput reports whether a turn's body makes the provider read input
// the body does not show, so that its size says nothing of the input's:
// content referenced by id or URL (an Anthropic image or document whose
// source is a url or a file, a container upload; a Chat file by file_id or
// an image by URL; a Responses input_file or input_image by file_id or URL;
// a Gemini fileData part), or history the provider keeps (Responses
// previous_response_id, conversation). Inline content (base64, data: URLs,
// text) is in the body and counted by its size.
func HiddenInput(body []byte) bool {
	marked := false
	for _, m := range hiddenMarkers {
		if bytes.Contains(body, m) {
			marked = true
			break
		}
	}
	if !marked {
		return false
	}
	root := gjson.ParseBytes(body)
	if root.Get("previous_response_id").String() != "" || root.Get("conversation").Exists() && root.Get("conversation").Type != gjson.Null {
		return true
	}
	for _, conv := range []string{"messages", "input", "contents", "system"} {
		if references(root.Get(conv), 0) {
			return true
		}
	}
	return false
}

// references walks v for a content part that references what the body
// does not carry.
func references(v gjson.Result, depth int) bool {
	if depth > maxHiddenDepth || !v.IsObject() && !v.IsArray() {
		return false
	}
	if v.IsObject() && referencing(v) {
		return true
	}
	found := false
	v.ForEach(func(_, el gjson.Result) bool {
		found = references(el, depth+1)
		return !found
	})
	return found
}

// referencing reports whether the object part is one content part that
// references content by id or URL.
func referencing(part gjson.Result) bool {
	notData := func(u gjson.Result) bool {
		return u.Type == gjson.String && !strings.HasPrefix(strings.TrimSpace(u.Str), "data:")
	}
	switch part.Get("type").Str {
	case "container_upload":
		return true
	case "file": // Chat
		return part.Get("file.file_id").String() != ""
	case "image_url": // Chat
		u := part.Get("image_url")
		if u.IsObject() {
			u = u.Get("url")
		}
		return notData(u)
	case "input_file": // Responses
		return part.Get("file_id").String() != "" || notData(part.Get("file_url"))
	case "input_image": // Responses
		return part.Get("file_id").String() != "" || notData(part.Get("image_url"))
	}
	if src := part.Get("source"); src.IsObject() { // Anthropic image, document
		switch src.Get("type").Str {
		case "url", "file":
			return true
		}
	}
	if fd := part.Get("fileData"); fd.IsObject() { // Gemini
		return true
	}
	return false
}
