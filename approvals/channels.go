package approvals

import (
	"fmt"
	"log/slog"

	"gatekeeper/config"
)

// SlackInteractionsPath is where Slack's interactivity request URL points.
const SlackInteractionsPath = "/hooks/slack/interactions"

// Channels builds the notifiers cfg configures, for ServiceOptions.Notifiers.
// slack is nil when Slack is not configured; otherwise serve mounts
// slack.Handler(service) at POST SlackInteractionsPath.
func Channels(cfg config.Approvals, store Store, log *slog.Logger) (notifiers []Notifier, slack *Slack, err error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.Slack != nil {
		slack = NewSlack(*cfg.Slack, store, WithSlackLogger(log), WithSlackPeople(NewDirectory(cfg)))
		notifiers = append(notifiers, slack)
	}
	if cfg.Webhook != nil {
		wh, err := NewWebhook(*cfg.Webhook, WithWebhookLogger(log))
		if err != nil {
			return nil, nil, fmt.Errorf("approvals.webhook: %w", err)
		}
		notifiers = append(notifiers, wh)
	}
	return notifiers, slack, nil
}
