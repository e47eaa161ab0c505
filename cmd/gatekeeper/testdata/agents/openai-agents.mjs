// An app built on the OpenAI Agents SDK (JavaScript), run by the matrix
// test: one agent with one shell-like function tool, pointed at gatekeeper
// by its OpenAI client's base URL. The SDK is loaded from the agents
// directory .ci/run installs (AGENTS_DIR); the API (responses or
// chat_completions) comes from AGENTS_API.
//
// It prints the run's final output and exits 0, or prints the error (an
// APIError carries the status) and exits 1.
import { createRequire } from 'node:module';
import { execSync } from 'node:child_process';

const require = createRequire(process.env.AGENTS_DIR + '/node_modules/');
const { Agent, run, tool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } =
  await import(require.resolve('@openai/agents'));
const { default: OpenAI } = await import(require.resolve('openai'));

setTracingDisabled(true);
setOpenAIAPI(process.env.AGENTS_API || 'responses');
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY }));

const runCommand = tool({
  name: 'run_command',
  description: 'Run a shell command in the working directory and return its output.',
  parameters: {
    type: 'object',
    properties: { command: { type: 'string', description: 'the command line' } },
    required: ['command'],
    additionalProperties: false,
  },
  strict: true,
  execute: async ({ command }) => {
    try {
      return execSync(command, { encoding: 'utf8', shell: '/bin/sh', timeout: 30000 });
    } catch (err) {
      return `failed: ${err.message}`;
    }
  },
});

const agent = new Agent({
  name: 'builder',
  instructions: 'You keep the build directory tidy. Use run_command to run commands.',
  model: process.env.AGENTS_MODEL || 'gpt-4.1',
  tools: [runCommand],
});

try {
  const result = await run(agent, process.argv[2], { maxTurns: 6 });
  console.log(JSON.stringify({ final_output: result.finalOutput }));
} catch (err) {
  console.log(JSON.stringify({ error: String(err && err.message), status: err && err.status }));
  process.exit(1);
}
