// Drives agentnb's AI SDK door with the `ai` package's DefaultChatTransport (what useChat
// uses) and readUIMessageStream. One JSON object per line on stdout: {"chunk": ...} for each
// UI message chunk, {"message": ...} for the assistant message the chunks built, and
// {"aborted": true} / {"none": true} where a step says so, {"streamError": ...} when an error
// part ended the stream.
//
// argv[2] is JSON: {url, token, chatId, steps: [...]}, each step
//   {send: messages, abortAfter?: n}  POST the messages (abort after n text deltas), or
//   {resume: true}                    reconnectToStream (GET .../stream).
import { pathToFileURL } from "node:url";
import path from "node:path";

const { DefaultChatTransport, readUIMessageStream } = await import(
  pathToFileURL(path.join(process.env.NODE_PATH, "ai", "dist", "index.js")).href
);

const args = JSON.parse(process.argv[2]);
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const transport = new DefaultChatTransport({
  api: `${args.url}/aisdk/chat`,
  headers: { Authorization: `Bearer ${args.token}` },
});

async function consume(stream, abortAfter, controller, message) {
  let deltas = 0;
  const tapped = stream.pipeThrough(
    new TransformStream({
      transform(chunk, out) {
        print({ chunk });
        out.enqueue(chunk);
        if (chunk.type === "text-delta" && abortAfter && ++deltas >= abortAfter) controller.abort();
      },
    }),
  );
  try {
    for await (const snapshot of readUIMessageStream({ stream: tapped, message, terminateOnError: true })) {
      message = snapshot;
    }
  } catch (error) {
    if (controller && controller.signal.aborted) {
      print({ aborted: true });
      return;
    }
    // An error part ends the stream (terminateOnError): the SDK's reading of it.
    print({ streamError: String(error && error.message ? error.message : error), message });
    return;
  }
  print({ message });
}

for (const step of args.steps) {
  if (step.send) {
    const controller = new AbortController();
    try {
      const stream = await transport.sendMessages({
        chatId: args.chatId,
        messages: step.send,
        trigger: "submit-message",
        messageId: undefined,
        abortSignal: controller.signal,
      });
      // As useChat does: answers in the last (assistant) message continue that message.
      const last = step.send[step.send.length - 1];
      await consume(stream, step.abortAfter, controller, last.role === "assistant" ? last : undefined);
    } catch (error) {
      if (controller.signal.aborted) print({ aborted: true });
      else throw error;
    }
  } else if (step.resume) {
    const stream = await transport.reconnectToStream({ chatId: args.chatId });
    if (stream === null) print({ none: true });
    else await consume(stream);
  }
}
process.exit(0);
