// An app built on the Claude Agent SDK, run by the matrix test: one query
// with Claude Code's tools, permissions bypassed, pointed at gatekeeper by
// ANTHROPIC_BASE_URL in the environment the SDK gives the CLI it bundles.
// The SDK is loaded from the agents directory .ci/run installs
// (AGENTS_DIR).
//
// It prints each message as a JSON line and exits 0 when the result is a
// success, 1 otherwise.
import { createRequire } from 'node:module';

const require = createRequire(process.env.AGENTS_DIR + '/node_modules/');
const { query } = await import(require.resolve('@anthropic-ai/claude-agent-sdk'));

let ok = false;
try {
  for await (const msg of query({
    prompt: process.argv[2],
    options: {
      model: 'claude-sonnet-4-5',
      cwd: process.cwd(),
      permissionMode: 'bypassPermissions',
      allowDangerouslySkipPermissions: true,
      settingSources: [],
      maxTurns: 6,
      env: { ...process.env },
    },
  })) {
    console.log(JSON.stringify(msg));
    if (msg.type === 'result') ok = msg.subtype === 'success' && !msg.is_error;
  }
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.message) }));
}
process.exit(ok ? 0 : 1);
