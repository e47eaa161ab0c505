// Package callitems is the table of the OpenAI Responses output items that
// are calls (function, custom tool, shell, patch, computer, hosted tools),
// so that the decoder, the call filter, the continuation and the request
// reader agree on which item types are calls and how each is answered.
package callitems
