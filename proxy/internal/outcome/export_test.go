package outcome

// MarkLate is markLate, for the tests outside the package.
func (d *TurnData) MarkLate() { d.markLate() }
