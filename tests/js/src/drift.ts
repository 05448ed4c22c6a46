// Compile-time proof that the shapes bite: each line below must fail to type-check (tsc
// reports an unused `@ts-expect-error` otherwise). Never run.
import type { Change, Lifecycle, ReasoningItem, UserMessageItem } from "../../../pkg-web/agentwire.js";
import { lit, object, oneOf, str, tagged, type Shape } from "./shapes.js";

export function drift(): void {
  // @ts-expect-error a missing optional key (run_id)
  object<UserMessageItem>({ kind: lit("user_message"), text: str }, {});
  // @ts-expect-error a key the type does not have
  object<UserMessageItem>({ kind: lit("user_message"), text: str, extra: str }, { run_id: str });
  // @ts-expect-error a missing required key (text)
  object<UserMessageItem>({ kind: lit("user_message") }, { run_id: str });
  // @ts-expect-error a missing member of a string union
  oneOf<Lifecycle>({ initializing: true, idle: true, running: true, error: true });
  // @ts-expect-error a missing variant of a tagged union
  tagged<Change, "op">("op", {});
  // @ts-expect-error a shape of another type where a variant's shape is expected
  const wrong: Shape<UserMessageItem> = object<ReasoningItem>({ kind: lit("reasoning"), text: str, streaming: str, discarded: str }, { message_id: str, run_id: str });
  void wrong;
}
