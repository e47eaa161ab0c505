package mockprovider

// HeaderTurn names the request header that picks a turn: a TurnSpec as a
// JSON object, or the name of a script or built-in turn. It passes through
// gatekeeper unchanged, so tests set it on the client side.
const HeaderTurn = "X-Mock-Turn"

// family is the error and header dialect of a route.
type family int

const (
	familyAnthropic family = iota
	familyOpenAI
	familyGemini
)

func (a API) family() family {
	switch a {
	case APIAnthropic:
		return familyAnthropic
	case APIGemini:
		return familyGemini
	}
	return familyOpenAI
}

// errorShape fills in the status, error type and message of an HTTP error
// reply, from what the providers send for that status.
func errorShape(api API, status int, typ, msg string) (int, string, string) {
	fam := api.family()
	if status == 0 {
		status = 503
		if fam == familyAnthropic {
			status = 529
		}
	}
	defType, defMsg := statusError(fam, status)
	return status, orDefault(typ, defType), orDefault(msg, defMsg)
}

func statusError(fam family, status int) (string, string) {
	if fam == familyGemini {
		return geminiStatus(status)
	}
	if fam == familyAnthropic {
		switch status {
		case 400:
			return "invalid_request_error", "Invalid request."
		case 401:
			return "authentication_error", "invalid x-api-key"
		case 403:
			return "permission_error", "Your API key does not have permission to use the specified resource."
		case 404:
			return "not_found_error", "Not found."
		case 413:
			return "request_too_large", "Request exceeds the maximum allowed number of bytes."
		case 429:
			return "rate_limit_error", "Number of requests has exceeded your rate limit. Please try again later."
		case 504:
			return "timeout_error", "Request timed out."
		case 529:
			return "overloaded_error", "Overloaded"
		}
		if status >= 500 {
			return "api_error", "Internal server error"
		}
		return "invalid_request_error", "Invalid request."
	}
	switch status {
	case 400:
		return "invalid_request_error", "Invalid request."
	case 401:
		return "authentication_error", "Incorrect API key provided."
	case 403:
		return "permission_error", "You are not allowed to use this resource."
	case 404:
		return "invalid_request_error", "The requested resource does not exist."
	case 429:
		return "requests", "Rate limit reached for requests. Please try again later."
	case 503:
		return "server_error", "The engine is currently overloaded, please try again later"
	}
	if status >= 500 {
		return "server_error", "The server had an error while processing your request. Sorry about that!"
	}
	return "invalid_request_error", "Invalid request."
}

// openAICode is the error code OpenAI pairs with a status.
func openAICode(status int) any {
	switch status {
	case 401:
		return "invalid_api_key"
	case 429:
		return "rate_limit_exceeded"
	}
	return nil
}

// midstreamError is the error event's type and message for a stream that
// fails half way.
func midstreamError(api API, typ, msg string) (string, string) {
	if api == APIGemini {
		return orDefault(typ, "UNAVAILABLE"), orDefault(msg, "The model is overloaded. Please try again later.")
	}
	if api == APIAnthropic {
		return orDefault(typ, "overloaded_error"), orDefault(msg, "Overloaded")
	}
	return orDefault(typ, "server_error"), orDefault(msg, "The server had an error while processing your request. Sorry about that!")
}

// anthropicError is Anthropic's error body (also the data of its stream
// error event).
func anthropicError(typ, msg, requestID string) obj {
	return obj{{"type", "error"}, {"error", obj{{"type", typ}, {"message", msg}}}, {"request_id", requestID}}
}

// openAIError is OpenAI's error body; param names the offending field.
func openAIError(typ, msg string, param, code any) obj {
	return obj{{"error", obj{{"message", msg}, {"type", typ}, {"param", param}, {"code", code}}}}
}
