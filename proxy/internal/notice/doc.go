// Package notice owns the texts gatekeeper puts in front of the model:
// the budget notice appended to a steered or restricted request, the
// loop watchdog's notice and the text of a call it withheld, the notice
// of a reply cut at its output limit and of the call it was writing, and
// what is left of a budget as those texts and the refusals say it.
package notice
