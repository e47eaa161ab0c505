package trajectory

import "slices"

// Person is who started a run when a person's token, not a virtual key,
// admitted it: the identity provider's subject, and the name, email and
// groups its token carried then.
type Person struct {
	Subject string   `json:"subject"`
	Name    string   `json:"name,omitempty"`
	Email   string   `json:"email,omitempty"`
	Groups  []string `json:"groups,omitempty"`
}

// Label is how logs and views name the person: the email, else the name,
// else the subject; "" for no person.
func (p *Person) Label() string {
	switch {
	case p == nil:
		return ""
	case p.Email != "":
		return p.Email
	case p.Name != "":
		return p.Name
	}
	return p.Subject
}

// Is reports whether p is the person who (Filter.Person): who is p's
// subject or its label. A nil p is no one.
func (p *Person) Is(who string) bool {
	return p != nil && who != "" && (p.Subject == who || p.Label() == who)
}

// Clone is a copy of p sharing nothing with it; nil for nil.
func (p *Person) Clone() *Person {
	if p == nil {
		return nil
	}
	c := *p
	c.Groups = slices.Clone(p.Groups)
	return &c
}

func (p *Person) sizeJSON() int {
	if p == nil {
		return 0
	}
	n := 60 + len(p.Subject) + len(p.Name) + len(p.Email)
	for _, g := range p.Groups {
		n += len(g) + 3
	}
	return n
}

func appendPerson(b []byte, p *Person) []byte {
	b = append(b, `{"subject":`...)
	b = AppendJSONString(b, p.Subject)
	b = appendOptString(b, `,"name":`, p.Name)
	b = appendOptString(b, `,"email":`, p.Email)
	if len(p.Groups) > 0 {
		b = append(b, `,"groups":[`...)
		for i, g := range p.Groups {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, g)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}
