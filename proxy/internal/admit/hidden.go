package admit

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"gatekeeper/streaming"
)

// underscored are the member names with an underscore that reference
// content by id or URL, or history the provider keeps, split at it: a body
// without one of them, nor an Anthropic url source, a Responses
// conversation or a Gemini fileData part, references nothing (the test
// before the walk, on every turn: one pass from underscore to underscore).
var underscored = [][2]string{
	{`"file`, `_id"`}, {`"file`, `_url"`}, {`"image`, `_url"`}, {`"container`, `_upload"`}, {`"previous_response`, `_id"`},
}

// marked reports whether body, a turn of api, may reference content it
// does not carry.
func marked(api streaming.API, body []byte) bool {
	for i := 0; i < len(body); {
		j := bytes.IndexByte(body[i:], '_')
		if j < 0 {
			break
		}
		at := i + j
		for _, m := range underscored {
			if bytes.HasSuffix(body[:at], []byte(m[0])) && bytes.HasPrefix(body[at:], []byte(m[1])) {
				return true
			}
		}
		i = at + 1
	}
	// A member name written with escapes (\u005f for _) hides from these
	// tests: such a body is walked, its names decoded.
	if bytes.Contains(body, []byte(`\u00`)) {
		return true
	}
	// The rest, by API: an Anthropic source of type url (a url member
	// with a string value; a tool's url parameter is an object), a
	// Responses conversation, a Gemini fileData part.
	switch api {
	case streaming.APIAnthropic:
		return stringURL(body)
	case streaming.APIResponses:
		return bytes.Contains(body, []byte(`"conversation"`))
	case streaming.APIGemini:
		return bytes.Contains(body, []byte(`"fileData"`))
	}
	return false
}

// stringURL reports whether body has a member "url" whose value is a
// string, whatever the space around its colon.
func stringURL(body []byte) bool {
	key := []byte(`"url"`)
	for i := 0; i < len(body); {
		j := bytes.Index(body[i:], key)
		if j < 0 {
			return false
		}
		rest := bytes.TrimLeft(body[i+j+len(key):], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			if rest = bytes.TrimLeft(rest[1:], " \t\r\n"); len(rest) > 0 && rest[0] == '"' {
				return true
			}
		}
		i += j + len(key)
	}
	return false
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
func HiddenInput(api streaming.API, body []byte) bool {
	if !marked(api, body) {
		return false
	}
	found := false
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "previous_response_id":
			found = v.String() != ""
		case "conversation":
			found = v.Exists() && v.Type != gjson.Null
		case "messages", "input", "contents":
			found = references(v, 0)
		}
		return !found
	})
	return found
}

// references walks v for a content part that references what the body
// does not carry, reading each object's members once.
func references(v gjson.Result, depth int) bool {
	if depth > maxHiddenDepth || !v.IsObject() && !v.IsArray() {
		return false
	}
	found := false
	if v.IsArray() {
		v.ForEach(func(_, el gjson.Result) bool {
			found = references(el, depth+1)
			return !found
		})
		return found
	}
	var typ string
	var source, file, fileID, fileURL, imageURL gjson.Result
	v.ForEach(func(k, m gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = m.Str
		case "source":
			source = m
		case "file":
			file = m
		case "file_id":
			fileID = m
		case "file_url":
			fileURL = m
		case "image_url":
			imageURL = m
		case "fileData":
			found = m.IsObject() // Gemini
		default:
			found = (m.IsObject() || m.IsArray()) && references(m, depth+1)
		}
		return !found
	})
	if found {
		return true
	}
	notData := func(u gjson.Result) bool {
		return u.Type == gjson.String && !strings.HasPrefix(strings.TrimSpace(u.Str), "data:")
	}
	switch typ {
	case "container_upload":
		return true
	case "file": // Chat
		return file.Get("file_id").String() != ""
	case "image_url": // Chat
		if imageURL.IsObject() {
			imageURL = imageURL.Get("url")
		}
		return notData(imageURL)
	case "input_file": // Responses
		return fileID.String() != "" || notData(fileURL)
	case "input_image": // Responses
		return fileID.String() != "" || notData(imageURL)
	}
	if source.IsObject() { // Anthropic image, document
		switch source.Get("type").Str {
		case "url", "file":
			return true
		}
	}
	return false
}
