// Drives agentnb's AG-UI door with @ag-ui/client's HttpAgent (the client CopilotKit and
// assistant-ui use). One JSON object per line on stdout: {"event": ...} for each event the
// agent's pipeline delivers (after the client's own verification), then {"result": ...}
// with the run's messages, or {"error": "..."}.
//
// argv[2] is JSON: {url, token, threadId, mode: "run" | "connect", text?, resume?, after?}
const { HttpAgent, runHttpRequest, transformHttpEventStream } = require("@ag-ui/client");

const args = JSON.parse(process.argv[2]);
const headers = { Authorization: `Bearer ${args.token}` };

class ConnectingAgent extends HttpAgent {
  // HttpAgent has no connect of its own: this is how a frontend re-attaches to a thread.
  connect() {
    const query = args.after ? `?after=${encodeURIComponent(args.after)}` : "";
    const url = `${args.url}/agui/${encodeURIComponent(args.threadId)}/connect${query}`;
    return transformHttpEventStream(
      runHttpRequest(() => fetch(url, { method: "GET", headers: { ...headers, Accept: "text/event-stream" } })),
    );
  }
}

const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");

async function main() {
  const agent = new ConnectingAgent({ url: `${args.url}/agui`, headers, threadId: args.threadId });
  if (args.pendingInterrupts) agent.pendingInterrupts = args.pendingInterrupts;
  let finished = 0;
  const subscriber = {
    onEvent: ({ event }) => {
      print({ event });
      // A connect stream follows the thread for ever: leave after `runs` runs ended.
      if (args.runs && (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR")) {
        finished += 1;
        if (finished >= args.runs) agent.detachActiveRun();
      }
    },
  };
  if (args.mode === "connect") {
    await agent.connectAgent({}, subscriber);
  } else {
    if (args.text) agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: args.text });
    const params = args.resume ? { resume: args.resume } : {};
    await agent.runAgent(params, subscriber);
  }
  print({ result: { messages: agent.messages, state: agent.state } });
  process.exit(0); // a detached connect stream would keep its request open
}

main().catch((error) => {
  print({ error: String(error && error.stack ? error.stack : error) });
  process.exitCode = 1;
});
