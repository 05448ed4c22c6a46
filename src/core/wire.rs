//! The wire protocol between the companion and its clients (browser, `agentwire tail`):
//! message types, frame encoding that never exceeds the negotiated size, and the client-side
//! cursor that turns a resumable, possibly repeated stream into one gap-free, duplicate-free
//! sequence. The full protocol is written down in docs/protocol.md.
//!
//! Everything is JSON text frames tagged by `t`. Sans-IO: the server and the clients own the
//! sockets; this module only encodes, decodes and checks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ErrorCode;
use super::event::Event;
use super::event_ref::{packed, EventView};
use super::json::{
    json_fields, json_names, json_struct, json_write, json_write_names, json_write_tagged, to_json,
    JsonError, Reader,
};
use super::quoted::Quoted;
use super::snapshot::{Snapshot, SnapshotRequest};
use super::sorted::SortedMap;
use super::time::Timestamp;
use super::timeline::Item;

/// The protocol versions this build speaks, newest last.
pub const PROTOCOL_VERSIONS: &[u32] = &[1];

/// The largest frame either side sends unless both agree on less (1 MiB).
pub const DEFAULT_MAX_FRAME: usize = 1 << 20;

/// The smallest frame size a peer may ask for; below it, events could not be chunked sanely.
pub const MIN_MAX_FRAME: usize = 4 << 10;

/// What a client may ask for in `hello`'s `features`: `session_status`
/// ([`ServerMsg::SessionStatus`]), `binary_frames` ([`FEATURE_BINARY_FRAMES`]) and
/// `packed_events` ([`FEATURE_PACKED_EVENTS`]).
pub const FEATURES: &[&str] = &[
    FEATURE_SESSION_STATUS,
    FEATURE_BINARY_FRAMES,
    FEATURE_PACKED_EVENTS,
];

/// The feature that asks for [`ServerMsg::SessionStatus`].
pub const FEATURE_SESSION_STATUS: &str = "session_status";

/// The feature that asks the server to send every frame after `hello` as a binary WebSocket
/// message holding the same UTF-8 JSON text: a browser then hands the client an
/// `ArrayBuffer` that reaches wasm memory in one copy, where a text message is first made a
/// JS string and then encoded back to UTF-8 character by character. What the frames say is
/// unchanged; a client that does not ask gets text frames, as before.
pub const FEATURE_BINARY_FRAMES: &str = "binary_frames";

/// The feature that asks the server to send every `events` frame of a WebSocket as a binary
/// message in the packed form ([`crate::core::event_ref::packed`]): the same events,
/// read without scanning JSON. Every other frame is unchanged (text, or binary JSON with
/// `binary_frames`); a client that does not ask gets JSON, as before.
pub const FEATURE_PACKED_EVENTS: &str = "packed_events";

/// How a session id is spelled: `ses_` and 1 to 64 lowercase hex digits.
pub const SESSION_ID_RULE: &str = "a session id is ses_ followed by 1 to 64 lowercase hex digits";

/// The longest command id a client may choose (it is echoed in the reply).
pub const MAX_COMMAND_ID: usize = 128;

/// The longest error message a frame carries: whatever a peer sent that is quoted in one is
/// cut, so an error frame always fits the smallest negotiable frame.
pub const MAX_ERROR_MESSAGE: usize = 1024;

/// Whether `s` is a session id ([`SESSION_ID_RULE`]): checked on every route before a
/// session name is looked up, stored or echoed.
pub fn is_session_id(s: &str) -> bool {
    s.len() <= 68
        && s.strip_prefix("ses_").is_some_and(|hex| {
            !hex.is_empty() && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// Whether `s` can name a turn a client chose (`start_turn`'s `turn_id`): 1–128 bytes of
/// ASCII letters, digits, `_`, `-`, `.` and `:` (room for a UUID or an AG-UI run id, nothing
/// that needs escaping anywhere).
pub fn is_turn_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// A message from a client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ClientMsg {
    /// First message: the versions the client speaks and the largest frame it accepts.
    Hello {
        protocols: Vec<u32>,
        #[serde(default)]
        max_frame: Option<usize>,
        #[serde(default)]
        client: Option<String>,
        /// Optional server messages the client reads (see [`FEATURES`]); a server sends
        /// none it was not asked for, so clients that predate one never meet it.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        features: Vec<String>,
    },
    /// Follow a session from a cursor: `after` = the last sequence seen (0 for all), `epoch`
    /// = the epoch those sequences belong to (absent the first time).
    ///
    /// With `snapshot` and no cursor (`after` 0), the session is first sent as it stands
    /// ([`ServerMsg::Snapshot`]), then the events after the snapshot's cursor; a client that
    /// has a cursor resumes from it and the server ignores `snapshot`.
    Subscribe {
        session: String,
        #[serde(default)]
        after: u64,
        #[serde(default)]
        epoch: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotRequest>,
    },
    /// Older items of a session: up to `limit` items just before item index `before` (a
    /// snapshot's `start`, then each page's). Answered by [`ServerMsg::History`] (or a
    /// failed `reply`).
    History {
        id: String,
        session: String,
        before: usize,
        limit: usize,
    },
    Unsubscribe {
        session: String,
    },
    /// Start a foreground turn; the reply carries `{turnId}`. With a `turn_id` of the
    /// client's choosing the command is idempotent: a turn of that id that already exists is
    /// answered, not started again (what makes a resend after a lost reply safe).
    StartTurn {
        id: String,
        session: String,
        prompt: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
    },
    /// Interrupt the turn in progress; with a `turn_id`, only that turn, and succeed if it has
    /// already ended (idempotent too).
    Interrupt {
        id: String,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
    },
    AnswerApproval {
        id: String,
        session: String,
        request_id: String,
        decision: Decision,
    },
    /// Switch the session's agent to one of its `modes`.
    SetMode {
        id: String,
        session: String,
        mode: String,
    },
    /// Change the model and/or the thinking level (at least one).
    SetModel {
        id: String,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thinking: Option<Thinking>,
    },
    /// Reopen a session whose process is gone, on the CLI's own session.
    ResumeSession {
        id: String,
        session: String,
    },
    /// The session's record and live state: what `GET /api/sessions/{id}` answers.
    DescribeSession {
        id: String,
        session: String,
    },
    Ping {
        #[serde(default)]
        id: Option<String>,
    },
}

/// A user's answer to an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

/// How hard the model thinks, where the agent CLI lets a client choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thinking {
    Off,
    Low,
    Medium,
    High,
}

/// A message from the server, read by [`ServerMsg::decode`] (`core::json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ServerMsg {
    Welcome {
        protocol: u32,
        epoch: String,
        max_frame: usize,
        heartbeat_ms: u64,
        server: String,
    },
    /// Events of one session, contiguous and in order.
    Events {
        session: String,
        epoch: String,
        events: Vec<Event>,
    },
    /// One event too large for a frame, in pieces of its JSON text; `last` ends it.
    EventPart {
        session: String,
        epoch: String,
        sequence: u64,
        index: u32,
        last: bool,
        text: String,
    },
    /// The session as it stands at the cursor `after`/`epoch` (asked for by a subscribe's
    /// `snapshot`): the events after it follow. Sent as `message_part`s when it does not fit
    /// a frame.
    Snapshot(Box<Snapshot>),
    /// The answer to `history`: the items from index `start` up to the `before` asked,
    /// oldest first; older ones exist when `start` is above 0. Sent as `message_part`s when
    /// it does not fit a frame.
    History {
        id: String,
        session: String,
        start: usize,
        items: Vec<Item>,
    },
    /// A piece of the JSON text of one server message too large for a frame (a snapshot, a
    /// history page); pieces of one message come in order, `last` ends it.
    MessagePart {
        session: String,
        index: u32,
        last: bool,
        text: String,
    },
    /// Everything stored up to `latest` was sent; what follows is live.
    CaughtUp {
        session: String,
        latest: u64,
    },
    /// The client's cursor belongs to another epoch or lies beyond the log: drop what you hold
    /// for this session; the log is replayed from the start right after.
    Reset {
        session: String,
        epoch: String,
        reason: String,
    },
    /// The server fell behind sending live events to this client and switched it back to
    /// catch-up from the store (nothing is skipped; a `caught_up` follows).
    Resync {
        session: String,
        after: u64,
    },
    /// Whether the session's events reach the store: sent once when a subscription starts,
    /// then whenever it changes, to clients that asked for it ([`FEATURE_SESSION_STATUS`]).
    /// Not an event (a store that is down cannot log it): it carries no sequence.
    SessionStatus {
        session: String,
        store: StoreStatus,
    },
    Heartbeat {
        now_ms: i64,
    },
    Pong {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    /// The answer to a command, correlated by `id`.
    Reply {
        id: String,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<WireError>,
    },
    /// A protocol-level error (bad frame, unknown message, unknown session…).
    Error {
        #[serde(flatten)]
        error: WireError,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
    },
}

/// The fields of an `error` message (its error's are the message's own).
struct ErrorFields {
    code: String,
    message: String,
    session: Option<String>,
}

/// Whether a session's events reach the store, as the companion found it last: what
/// `GET /api/sessions/{id}` answers as `store`, and what `session_status` carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreStatus {
    pub state: StoreState,
    /// The last failure (while unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The first failure of this outage (while unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// Failed writes in this outage (while unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Events waiting, in order, to be stored.
    #[serde(default)]
    pub unstored: u64,
}

impl StoreStatus {
    /// The store takes the session's writes; `unstored` events wait for the one in flight.
    pub fn available(unstored: u64) -> StoreStatus {
        StoreStatus {
            state: StoreState::Available,
            error: None,
            since: None,
            attempts: None,
            unstored,
        }
    }

    pub fn is_available(&self) -> bool {
        self.state == StoreState::Available
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreState {
    Available,
    /// The last write failed; the session's events wait and are retried.
    Unavailable,
}

impl StoreState {
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreState::Available => "available",
            StoreState::Unavailable => "unavailable",
        }
    }
}

json_names!(StoreState: [Available, Unavailable]);
json_write_names!(StoreState);
json_write!(StoreStatus {
    state,
    error?,
    since?,
    attempts?,
    unstored
});
json_write!(WireError { code, message });
json_write_tagged!(ClientMsg: "t" {
    Hello "hello" { protocols, max_frame, client, features? },
    Subscribe "subscribe" { session, after, epoch, snapshot? },
    History "history" { id, session, before, limit },
    Unsubscribe "unsubscribe" { session },
    StartTurn "start_turn" { id, session, prompt, turn_id? },
    Interrupt "interrupt" { id, session, turn_id? },
    AnswerApproval "answer_approval" { id, session, request_id, decision },
    SetMode "set_mode" { id, session, mode },
    SetModel "set_model" { id, session, model?, thinking? },
    ResumeSession "resume_session" { id, session },
    DescribeSession "describe_session" { id, session },
    Ping "ping" { id },
});
json_write_names!(Decision {
    Allow = "allow",
    Deny = "deny"
});
json_write_names!(Thinking {
    Off = "off",
    Low = "low",
    Medium = "medium",
    High = "high",
});
json_struct!(StoreStatus { state, error, since, attempts, unstored = 0 });
json_struct!(WireError { code, message });
json_struct!(ErrorFields {
    code,
    message,
    session
});

/// A machine-readable error code with a human message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub code: String,
    pub message: String,
}

impl WireError {
    /// The message is cut to [`MAX_ERROR_MESSAGE`] bytes (at a character boundary, marked
    /// with `…`).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> WireError {
        let mut message = message.into();
        if message.len() > MAX_ERROR_MESSAGE {
            let mut end = MAX_ERROR_MESSAGE - '…'.len_utf8();
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        WireError {
            code: code.as_str().to_owned(),
            message,
        }
    }
}

/// Why a frame could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {size} bytes is over the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("unknown message type {}", Quoted(.0))]
    UnknownType(String),
}

impl DecodeError {
    pub const fn code(&self) -> ErrorCode {
        match self {
            DecodeError::TooLarge { .. } => ErrorCode::FrameTooLarge,
            DecodeError::Malformed(_) => ErrorCode::MalformedFrame,
            DecodeError::UnknownType(_) => ErrorCode::UnknownType,
        }
    }
}

/// A frame of `size` bytes is refused over `limit`, before it is read.
fn within_limit(size: usize, limit: usize) -> Result<(), DecodeError> {
    match size > limit {
        true => Err(DecodeError::TooLarge { size, limit }),
        false => Ok(()),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(frame: &str, limit: usize) -> Result<T, DecodeError> {
    within_limit(frame.len(), limit)?;
    serde_json::from_str(frame).map_err(|e| {
        let tag = serde_json::from_str::<Value>(frame)
            .ok()
            .and_then(|v| v.get("t").and_then(Value::as_str).map(str::to_owned));
        match tag {
            Some(t) if e.to_string().starts_with("unknown variant") => DecodeError::UnknownType(t),
            _ => DecodeError::Malformed(e.to_string()),
        }
    })
}

impl ClientMsg {
    /// Decodes a client frame no longer than `limit` bytes.
    pub fn decode(frame: &str, limit: usize) -> Result<ClientMsg, DecodeError> {
        decode(frame, limit)
    }

    /// The id a command's reply echoes.
    pub fn command_id(&self) -> Option<&str> {
        match self {
            ClientMsg::StartTurn { id, .. }
            | ClientMsg::Interrupt { id, .. }
            | ClientMsg::AnswerApproval { id, .. }
            | ClientMsg::SetMode { id, .. }
            | ClientMsg::SetModel { id, .. }
            | ClientMsg::ResumeSession { id, .. }
            | ClientMsg::DescribeSession { id, .. }
            | ClientMsg::History { id, .. } => Some(id),
            ClientMsg::Ping { id } => id.as_deref(),
            ClientMsg::Hello { .. }
            | ClientMsg::Subscribe { .. }
            | ClientMsg::Unsubscribe { .. } => None,
        }
    }

    /// The session the message is about.
    pub fn session(&self) -> Option<&str> {
        match self {
            ClientMsg::Subscribe { session, .. }
            | ClientMsg::Unsubscribe { session }
            | ClientMsg::StartTurn { session, .. }
            | ClientMsg::Interrupt { session, .. }
            | ClientMsg::AnswerApproval { session, .. }
            | ClientMsg::SetMode { session, .. }
            | ClientMsg::SetModel { session, .. }
            | ClientMsg::ResumeSession { session, .. }
            | ClientMsg::DescribeSession { session, .. }
            | ClientMsg::History { session, .. } => Some(session),
            ClientMsg::Hello { .. } | ClientMsg::Ping { .. } => None,
        }
    }

    /// The message as JSON: what serde's `Serialize` writes, by `core::json`'s writer.
    pub fn encode(&self) -> String {
        to_json(self)
    }
}

impl ServerMsg {
    /// Decodes a server frame no longer than `limit` bytes.
    pub fn decode(frame: &str, limit: usize) -> Result<ServerMsg, DecodeError> {
        within_limit(frame.len(), limit)?;
        let mut r = Reader::new(frame);
        let malformed = |e: JsonError| DecodeError::Malformed(e.to_string());
        r.object().map_err(malformed)?;
        let tag = r.tag("t").map_err(malformed)?;
        let msg = ServerMsg::variant(&tag, &mut r).map_err(malformed)?;
        let msg = msg.ok_or_else(|| DecodeError::UnknownType(tag.into_owned()))?;
        r.end().map_err(malformed)?;
        Ok(msg)
    }

    /// The rest of a message whose tag is `tag`, by `core::json` (`None`: no such message).
    fn variant(tag: &str, r: &mut Reader<'_>) -> Result<Option<ServerMsg>, JsonError> {
        use ServerMsg::*;
        let msg = match tag {
            "welcome" => json_fields!(
                r,
                Welcome {
                    protocol,
                    epoch,
                    max_frame,
                    heartbeat_ms,
                    server
                }
            ),
            "events" => json_fields!(
                r,
                Events {
                    session,
                    epoch,
                    events
                }
            ),
            "event_part" => json_fields!(
                r,
                EventPart {
                    session,
                    epoch,
                    sequence,
                    index,
                    last,
                    text
                }
            ),
            "snapshot" => super::snapshot::Snapshot::fields(r).map(|s| Snapshot(Box::new(s))),
            "history" => json_fields!(
                r,
                History {
                    id,
                    session,
                    start,
                    items
                }
            ),
            "message_part" => json_fields!(
                r,
                MessagePart {
                    session,
                    index,
                    last,
                    text
                }
            ),
            "caught_up" => json_fields!(r, CaughtUp { session, latest }),
            "reset" => json_fields!(
                r,
                Reset {
                    session,
                    epoch,
                    reason
                }
            ),
            "resync" => json_fields!(r, Resync { session, after }),
            "session_status" => json_fields!(r, SessionStatus { session, store }),
            "heartbeat" => json_fields!(r, Heartbeat { now_ms }),
            "pong" => json_fields!(r, Pong { id }),
            "reply" => json_fields!(
                r,
                Reply {
                    id,
                    ok,
                    result,
                    error
                }
            ),
            "error" => ErrorFields::fields(r).map(|e| Error {
                error: WireError {
                    code: e.code,
                    message: e.message,
                },
                session: e.session,
            }),
            _ => return Ok(None),
        };
        msg.map(Some)
    }

    /// Decodes a server frame that came as bytes (a binary message, [`FEATURE_BINARY_FRAMES`]):
    /// the same UTF-8 JSON text as a text frame, and the same result.
    pub fn decode_bytes(frame: &[u8], limit: usize) -> Result<ServerMsg, DecodeError> {
        if packed::is_packed(frame) {
            within_limit(frame.len(), limit)?;
            let f = packed::unpack(frame).map_err(DecodeError::Malformed)?;
            return Ok(ServerMsg::Events {
                session: f.session.into_owned(),
                epoch: f.epoch.into_owned(),
                events: f.events.into_iter().map(EventView::into_event).collect(),
            });
        }
        ServerMsg::decode(frame_text(frame, limit)?, limit)
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("server messages always serialize")
    }
}

/// The text of a frame that came as bytes: too large, or not UTF-8, is an error.
pub fn frame_text(frame: &[u8], limit: usize) -> Result<&str, DecodeError> {
    within_limit(frame.len(), limit)?;
    std::str::from_utf8(frame).map_err(|e| DecodeError::Malformed(format!("not UTF-8: {e}")))
}

/// Picks the newest version both sides speak.
pub fn negotiate(client_versions: &[u32]) -> Option<u32> {
    PROTOCOL_VERSIONS
        .iter()
        .rev()
        .copied()
        .find(|v| client_versions.contains(v))
}

/// One encoded server frame and the last sequence it completes (0 for a partial event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub text: String,
    pub last_sequence: u64,
}

/// Encodes events of one session as frames of at most `max_frame` bytes each: as many events
/// per `events` frame as fit, and an event that fits no frame on its own as `event_part`
/// frames. Order is kept. `max_frame` below [`MIN_MAX_FRAME`] is raised to it.
pub fn encode_events(session: &str, epoch: &str, events: &[Event], max_frame: usize) -> Vec<Frame> {
    let encoded: Vec<(u64, String)> = events.iter().map(|e| (e.sequence(), e.to_json())).collect();
    frame_encoded(
        session,
        epoch,
        encoded.iter().map(|(seq, json)| (*seq, json.as_str())),
        max_frame,
    )
}

/// [`encode_events`] for events already encoded: each item is an event's sequence and its
/// [`Event::to_json`]. The frames are byte for byte those of [`encode_events`], so a server can
/// encode each event once and frame it for every subscriber.
pub fn frame_encoded<'a>(
    session: &str,
    epoch: &str,
    events: impl IntoIterator<Item = (u64, &'a str)>,
    max_frame: usize,
) -> Vec<Frame> {
    let max_frame = max_frame.max(MIN_MAX_FRAME);
    let head = ServerMsg::Events {
        session: session.to_owned(),
        epoch: epoch.to_owned(),
        events: Vec::new(),
    }
    .encode();
    // `{"t":"events",…,"events":[]}`: events go between the brackets, comma separated.
    let prefix = &head[..head.len() - 2];
    let budget = max_frame - head.len();
    let mut frames = Vec::new();
    let mut body = String::new();
    let mut last = 0;
    let flush = |body: &mut String, frames: &mut Vec<Frame>, last: u64| {
        if !body.is_empty() {
            let mut text = String::with_capacity(head.len() + body.len());
            text.push_str(prefix);
            text.push_str(body);
            text.push_str("]}");
            frames.push(Frame {
                text,
                last_sequence: last,
            });
            body.clear();
        }
    };
    for (sequence, json) in events {
        let extra = json.len() + usize::from(!body.is_empty());
        if body.len() + extra <= budget {
            if !body.is_empty() {
                body.push(',');
            }
            body.push_str(json);
            last = sequence;
            continue;
        }
        flush(&mut body, &mut frames, last);
        if json.len() <= budget {
            body.push_str(json);
            last = sequence;
        } else {
            let parts = encode_parts(session, epoch, sequence, json, max_frame);
            let n = parts.len();
            frames.extend(parts.into_iter().enumerate().map(|(i, text)| Frame {
                text,
                last_sequence: if i + 1 == n { sequence } else { 0 },
            }));
        }
    }
    flush(&mut body, &mut frames, last);
    frames
}

/// Encodes one server message about `session` as frames of at most `max_frame` bytes: the
/// message itself when it fits, else `message_part` frames carrying its JSON text in pieces.
/// `max_frame` below [`MIN_MAX_FRAME`] is raised to it.
pub fn encode_message(session: &str, msg: &ServerMsg, max_frame: usize) -> Vec<String> {
    let max_frame = max_frame.max(MIN_MAX_FRAME);
    let text = msg.encode();
    if text.len() <= max_frame {
        return vec![text];
    }
    let empty = ServerMsg::MessagePart {
        session: session.to_owned(),
        index: u32::MAX,
        last: false,
        text: String::new(),
    }
    .encode();
    let pieces = pieces(&text, (max_frame - empty.len()) / 6);
    let n = pieces.len();
    (pieces.into_iter().enumerate())
        .map(|(i, piece)| {
            ServerMsg::MessagePart {
                session: session.to_owned(),
                index: i as u32,
                last: i + 1 == n,
                text: piece.to_owned(),
            }
            .encode()
        })
        .collect()
}

/// `text` cut into pieces of at most `room` bytes (at least one character each), at
/// character boundaries. A piece of JSON text escapes to at most six times its length
/// (`\u00XX`): callers pass a sixth of the room a frame leaves.
fn pieces(text: &str, room: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = room.max(4).min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

/// Reassembles `message_part`s of one session into the message they carry.
#[derive(Clone, Debug, Default)]
pub struct MessageParts {
    next: u32,
    text: String,
}

/// The largest message a client puts together from `message_part`s (a snapshot or history
/// page holds at most [`crate::core::snapshot::MAX_SNAPSHOT_ITEMS`] items plus what is open).
pub const MAX_MESSAGE: usize = 256 << 20;

impl MessageParts {
    /// Takes the next piece; the whole message when its last piece arrives. A piece out of
    /// order (a reconnect cut a message short) drops what was collected and is an error.
    pub fn accept(
        &mut self,
        index: u32,
        last: bool,
        text: &str,
    ) -> Result<Option<ServerMsg>, DecodeError> {
        if index != self.next {
            let expected = self.next;
            *self = MessageParts::default();
            if index != 0 {
                return Err(DecodeError::Malformed(format!(
                    "message part {index} came where part {expected} was expected"
                )));
            }
        }
        if self.text.len().saturating_add(text.len()) > MAX_MESSAGE {
            *self = MessageParts::default();
            return Err(DecodeError::Malformed(format!(
                "a message in parts over {MAX_MESSAGE} bytes"
            )));
        }
        self.text.push_str(text);
        self.next += 1;
        if !last {
            return Ok(None);
        }
        let whole = std::mem::take(self);
        ServerMsg::decode(&whole.text, usize::MAX).map(Some)
    }
}

fn encode_parts(
    session: &str,
    epoch: &str,
    sequence: u64,
    json: &str,
    max_frame: usize,
) -> Vec<String> {
    let empty = ServerMsg::EventPart {
        session: session.to_owned(),
        epoch: epoch.to_owned(),
        sequence,
        index: u32::MAX,
        last: false,
        text: String::new(),
    }
    .encode();
    let pieces = pieces(json, (max_frame - empty.len()) / 6);
    let n = pieces.len();
    (pieces.into_iter().enumerate())
        .map(|(i, piece)| {
            ServerMsg::EventPart {
                session: session.to_owned(),
                epoch: epoch.to_owned(),
                sequence,
                index: i as u32,
                last: i + 1 == n,
                text: piece.to_owned(),
            }
            .encode()
        })
        .collect()
}

/// What a [`Cursor`] made of an incoming batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Accepted<E = Event> {
    /// New events, in order, each exactly once.
    pub events: Vec<E>,
    /// Events already seen (a replay overlapping what was delivered), dropped.
    pub duplicates: u64,
    /// Set when the batch skipped sequences: the client must resubscribe from `after`.
    pub gap: Option<Gap>,
}

/// Sequences missing between what the client has and what arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub after: u64,
    pub next_received: u64,
}

/// The client side of one subscription: the last sequence delivered and its epoch. It
/// admits only the next sequence, so whatever the server or the network does (replays,
/// duplicates, reconnects), the page sees each event once, in order, or learns of a gap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub after: u64,
    pub epoch: Option<String>,
    /// Pieces of an event arriving as `event_part` frames, by index.
    parts: SortedMap<u32, String>,
    parts_sequence: u64,
}

impl Cursor {
    /// A cursor that resumes after `after` in `epoch` (`None`: whatever the server has).
    pub fn resume(after: u64, epoch: Option<String>) -> Cursor {
        Cursor {
            after,
            epoch,
            ..Cursor::default()
        }
    }

    /// The subscribe message that resumes from here.
    pub fn subscribe(&self, session: &str) -> ClientMsg {
        ClientMsg::Subscribe {
            session: session.to_owned(),
            after: self.after,
            epoch: self.epoch.clone(),
            snapshot: None,
        }
    }

    /// A reset: forget everything; the server replays from the start of `epoch`.
    pub fn reset(&mut self, epoch: &str) {
        self.after = 0;
        self.epoch = Some(epoch.to_owned());
        self.parts.clear();
    }

    /// Admits a batch of events: drops those at or below the cursor, stops at a gap.
    pub fn accept<E: EventView>(&mut self, epoch: &str, mut events: Vec<E>) -> Accepted<E> {
        let mut out = Accepted {
            events: Vec::new(),
            duplicates: 0,
            gap: None,
        };
        if self.epoch.as_deref() != Some(epoch) {
            if self.epoch.is_some() {
                // Events of another epoch, without a reset first: treat as a gap from 0.
                out.gap = Some(Gap {
                    after: self.after,
                    next_received: events.first().map_or(0, E::sequence),
                });
                return out;
            }
            self.epoch = Some(epoch.to_owned());
        }
        // Kept in place (no second vector): the duplicates dropped, everything from a gap on.
        events.retain(|event| {
            let seq = event.sequence();
            if out.gap.is_some() {
                false
            } else if seq <= self.after {
                out.duplicates += 1;
                false
            } else if seq == self.after + 1 {
                self.after = seq;
                true
            } else {
                out.gap = Some(Gap {
                    after: self.after,
                    next_received: seq,
                });
                false
            }
        });
        out.events = events;
        out
    }

    /// Collects an `event_part`; returns the whole event when its last piece arrives (an
    /// error when the pieces do not make an event). Pieces of another sequence than the one
    /// being assembled restart the assembly.
    pub fn accept_part(
        &mut self,
        sequence: u64,
        index: u32,
        last: bool,
        text: String,
    ) -> Result<Option<Event>, DecodeError> {
        if sequence != self.parts_sequence {
            self.parts.clear();
            self.parts_sequence = sequence;
        }
        self.parts.insert(index, text);
        let complete = last && self.parts.len() == index as usize + 1;
        if !complete {
            return Ok(None);
        }
        let json: String = std::mem::take(&mut self.parts).into_values().collect();
        Reader::read_all::<Event>(&json)
            .map(Some)
            .map_err(|e| DecodeError::Malformed(format!("event {sequence} reassembled badly: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use wasm_bindgen_test::wasm_bindgen_test;

    use super::*;
    use crate::core::event::{EventInit, EventType, Provider};
    use crate::core::time::Timestamp;
    use proptest::prelude::*;
    use serde_json::json;

    fn event(seq: u64, text: &str) -> Event {
        let mut init = EventInit::new(
            EventType::MessageStreamed,
            "s1",
            Provider::Demo,
            Timestamp::EPOCH,
        );
        init.sequence = seq;
        init.id = Some(crate::core::event::EventId::derive(&[
            "s1",
            &seq.to_string(),
        ]));
        init.data.insert("delta".into(), json!(text));
        Event::new(init).unwrap()
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn client_messages_round_trip_and_errors_are_precise() {
        let msgs = [
            r#"{"t":"hello","protocols":[1],"max_frame":65536}"#,
            r#"{"t":"subscribe","session":"s1","after":7,"epoch":"e1"}"#,
            r#"{"t":"start_turn","id":"c1","session":"s1","prompt":"hi"}"#,
            r#"{"t":"answer_approval","id":"c2","session":"s1","request_id":"r1","decision":"deny"}"#,
        ];
        for m in msgs {
            let decoded = ClientMsg::decode(m, 1 << 20).unwrap();
            assert_eq!(
                ClientMsg::decode(&decoded.encode(), 1 << 20).unwrap(),
                decoded
            );
        }
        let codes: Vec<_> = [r#"{"t":"teleport"}"#, "{not json", r#"{"t":"subscribe"}"#]
            .iter()
            .map(|f| ClientMsg::decode(f, 1 << 20).unwrap_err().code())
            .collect();
        assert_eq!(
            codes,
            [
                ErrorCode::UnknownType,
                ErrorCode::MalformedFrame,
                ErrorCode::MalformedFrame
            ]
        );
        let big = format!(r#"{{"t":"ping","id":"{}"}}"#, "x".repeat(100));
        assert_eq!(
            ClientMsg::decode(&big, 64).unwrap_err().code(),
            ErrorCode::FrameTooLarge
        );
    }

    /// An item of every kind.
    fn items() -> Vec<Item> {
        use crate::core::timeline::{Approval, ApprovalStatus, Message, ToolCall, ToolStatus};
        let message = |text: &str| Message {
            message_id: Some("m1".into()),
            text: text.into(),
            streaming: false,
            discarded: false,
            run_id: Some("r1".into()),
        };
        vec![
            Item::UserMessage {
                text: "fix \"it\"\n".into(),
                run_id: None,
            },
            Item::AssistantMessage(message("done")),
            Item::Reasoning(message("hm")),
            Item::ToolCall(ToolCall {
                tool_call_id: "t1".into(),
                tool_name: "bash".into(),
                input: json!({"command": "ls", "kind": "x", "t": [1, 2.5, null]}),
                status: ToolStatus::Failed,
                output: "out".into(),
                error: Some("exit 1".into()),
                title: None,
                parent_tool_use_id: None,
                run_id: None,
            }),
            Item::Todo {
                items: json!([{"content": "a", "status": "pending"}]),
                run_id: Some("r1".into()),
            },
            Item::Error {
                message: "boom".into(),
                provider_error: Some(json!({"kind": "rate_limited"})),
                run_id: None,
            },
            Item::Approval(Approval {
                request_id: "q1".into(),
                tool_name: "edit".into(),
                input: json!({}),
                status: ApprovalStatus::Pending,
                tool_call_id: Some("t1".into()),
                run_id: None,
            }),
        ]
    }

    /// A message of every type.
    fn server_messages() -> Vec<ServerMsg> {
        let mut snapshot = crate::core::snapshot::Projection::new("s1").snapshot("e1", 10);
        snapshot.items = items();
        let error = WireError::new(ErrorCode::UnknownSession, "no such session");
        vec![
            ServerMsg::Welcome {
                protocol: 1,
                epoch: "e1".into(),
                max_frame: 65536,
                heartbeat_ms: 15000,
                server: "agentwire".into(),
            },
            ServerMsg::Events {
                session: "s1".into(),
                epoch: "e1".into(),
                events: vec![event(1, "a"), event(2, "b")],
            },
            ServerMsg::EventPart {
                session: "s1".into(),
                epoch: "e1".into(),
                sequence: 3,
                index: 0,
                last: false,
                text: "{\"id\"".into(),
            },
            ServerMsg::Snapshot(Box::new(snapshot)),
            ServerMsg::History {
                id: "c1".into(),
                session: "s1".into(),
                start: 4,
                items: items(),
            },
            ServerMsg::MessagePart {
                session: "s1".into(),
                index: 2,
                last: true,
                text: "}".into(),
            },
            ServerMsg::CaughtUp {
                session: "s1".into(),
                latest: 9,
            },
            ServerMsg::Reset {
                session: "s1".into(),
                epoch: "e2".into(),
                reason: "stale_epoch".into(),
            },
            ServerMsg::Resync {
                session: "s1".into(),
                after: 5,
            },
            ServerMsg::SessionStatus {
                session: "s1".into(),
                store: StoreStatus::available(3),
            },
            ServerMsg::Heartbeat { now_ms: -1 },
            ServerMsg::Pong { id: None },
            ServerMsg::Pong {
                id: Some("p1".into()),
            },
            ServerMsg::Reply {
                id: "c2".into(),
                ok: true,
                result: Some(json!({"turn_id": "u1"})),
                error: None,
            },
            ServerMsg::Reply {
                id: "c3".into(),
                ok: false,
                result: None,
                error: Some(error.clone()),
            },
            ServerMsg::Error {
                error: error.clone(),
                session: Some("s1".into()),
            },
            ServerMsg::Error {
                error,
                session: None,
            },
        ]
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn server_messages_read_back_with_their_tags_anywhere() {
        for msg in server_messages() {
            let text = msg.encode();
            assert_eq!(
                ServerMsg::decode(&text, 1 << 20).as_ref(),
                Ok(&msg),
                "{text}"
            );
            // A binary frame holds the same text and decodes the same.
            assert_eq!(
                ServerMsg::decode_bytes(text.as_bytes(), 1 << 20).as_ref(),
                Ok(&msg)
            );
            // Another writer's order: keys sorted (so `t` and every item's `kind` come after
            // other keys), and whitespace.
            let sorted =
                serde_json::to_string_pretty(&serde_json::from_str::<Value>(&text).unwrap())
                    .unwrap();
            assert!(!sorted.starts_with(r#"{"t""#));
            assert_eq!(
                ServerMsg::decode(&sorted, 1 << 20).as_ref(),
                Ok(&msg),
                "{sorted}"
            );
        }
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn malformed_server_frames_are_told_apart() {
        let e = event(1, "x").to_json();
        let bad_event = format!(
            r#"{{"t":"events","session":"s1","epoch":"e1","events":[{}]}}"#,
            e.replace("evt_", "evt_X")
        );
        let truncated = format!(r#"{{"t":"events","session":"s1","epoch":"e1","events":[{e}]"#);
        let cases: &[(&str, DecodeError)] = &[
            (
                r#"{"t":"teleport"}"#,
                DecodeError::UnknownType("teleport".into()),
            ),
            (
                r#"{"a":1,"t":"teleport"}"#,
                DecodeError::UnknownType("teleport".into()),
            ),
            (
                r#"{"session":"s1"}"#,
                DecodeError::Malformed("missing field `t` at line 1 column 16".into()),
            ),
            (
                "{}",
                DecodeError::Malformed("missing field `t` at line 1 column 2".into()),
            ),
            (
                r#"{"t":7}"#,
                DecodeError::Malformed(
                    "invalid type: number, expected a string at line 1 column 6".into(),
                ),
            ),
            (
                r#"{"x":0,"t":7}"#,
                DecodeError::Malformed(
                    "invalid type: number, expected a string at line 1 column 12".into(),
                ),
            ),
            (
                "[1]",
                DecodeError::Malformed(
                    "invalid type: sequence, expected a map at line 1 column 1".into(),
                ),
            ),
            (
                r#"{"t":"events","session":"s1","epoch":"e1"}"#,
                DecodeError::Malformed("missing field `events` at line 1 column 42".into()),
            ),
            (
                r#"{"epoch":"e1","t":"events","session":"s1"}"#,
                DecodeError::Malformed("missing field `events` at line 1 column 42".into()),
            ),
            (
                r#"{"t":"events","session":"s1","epoch":7,"events":[]}"#,
                DecodeError::Malformed(
                    "invalid type: number, expected a string at line 1 column 38".into(),
                ),
            ),
            (
                r#"{"t":"error","code":"x"}"#,
                DecodeError::Malformed("missing field `message` at line 1 column 24".into()),
            ),
            (
                r#"{"t":"events","#,
                DecodeError::Malformed("EOF while parsing an object at line 1 column 14".into()),
            ),
        ];
        for (frame, want) in cases {
            assert_eq!(
                ServerMsg::decode(frame, 1 << 20).as_ref(),
                Err(want),
                "{frame}"
            );
        }
        for frame in [bad_event, truncated] {
            assert_eq!(
                ServerMsg::decode(&frame, 1 << 20).unwrap_err().code(),
                ErrorCode::MalformedFrame,
                "{frame}"
            );
        }
        let good = server_messages()[1].encode();
        assert_eq!(
            ServerMsg::decode(&good, 16).unwrap_err().code(),
            ErrorCode::FrameTooLarge
        );
        let codes: Vec<_> = [
            (good.as_bytes(), 16),
            (&b"{\"t\":\"pong\"\xff}"[..], 1 << 20),
        ]
        .iter()
        .map(|&(frame, limit)| ServerMsg::decode_bytes(frame, limit).unwrap_err().code())
        .collect();
        assert_eq!(codes, [ErrorCode::FrameTooLarge, ErrorCode::MalformedFrame]);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn session_ids_are_checked_and_error_frames_stay_small() {
        let max = format!("ses_{}", "f".repeat(64));
        for good in ["ses_0", "ses_0123456789abcdef01234567", max.as_str()] {
            assert!(is_session_id(good), "{good}");
        }
        let long = format!("ses_{}", "f".repeat(65));
        for bad in [
            "",
            "ses_",
            "ses_ABC",
            "ses_xyz",
            "s1",
            "ses_12 ",
            long.as_str(),
        ] {
            assert!(!is_session_id(bad), "{bad}");
        }
        // Whatever an error quotes, its frame fits the smallest frame a peer may negotiate.
        let quoted = format!("no session {:?}", "é".repeat(1 << 20));
        let frame = ServerMsg::Error {
            error: WireError::new(ErrorCode::UnknownSession, quoted),
            session: Some(max.clone()),
        }
        .encode();
        assert!(frame.len() < MIN_MAX_FRAME, "{}", frame.len());
        assert_eq!(
            WireError::new(ErrorCode::UnknownError, "short").message,
            "short"
        );
        let start = ClientMsg::decode(
            r#"{"t":"start_turn","id":"c1","session":"ses_1","prompt":"hi"}"#,
            1 << 20,
        )
        .unwrap();
        assert_eq!(
            (start.command_id(), start.session()),
            (Some("c1"), Some("ses_1"))
        );
        assert!(matches!(start, ClientMsg::StartTurn { turn_id: None, .. }));
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn turn_ids_a_client_chooses_are_checked_and_round_trip() {
        let uuid = "6f1c2a0e-3d4b-4c5d-9e8f-0a1b2c3d4e5f";
        let max = "t".repeat(128);
        for good in ["turn_0123abcd", uuid, "run:1.2", max.as_str()] {
            assert!(is_turn_id(good), "{good}");
        }
        let long = "t".repeat(129);
        for bad in ["", "turn 1", "turn/1", "é", "a\n", long.as_str()] {
            assert!(!is_turn_id(bad), "{bad:?}");
        }
        let start = ClientMsg::StartTurn {
            id: "c1".into(),
            session: "ses_1".into(),
            prompt: "hi".into(),
            turn_id: Some("turn_1".into()),
        };
        let text = start.encode();
        assert_eq!(
            text,
            r#"{"t":"start_turn","id":"c1","session":"ses_1","prompt":"hi","turn_id":"turn_1"}"#
        );
        assert_eq!(ClientMsg::decode(&text, 1 << 20).unwrap(), start);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn session_status_is_asked_for_in_hello_and_round_trips() {
        let old = ClientMsg::decode(r#"{"t":"hello","protocols":[1]}"#, 1 << 20).unwrap();
        assert!(matches!(old, ClientMsg::Hello { features, .. } if features.is_empty()));
        let asked = ClientMsg::Hello {
            protocols: vec![1],
            max_frame: None,
            client: None,
            features: vec![FEATURE_SESSION_STATUS.to_owned()],
        };
        assert_eq!(
            asked.encode(),
            r#"{"t":"hello","protocols":[1],"max_frame":null,"client":null,"features":["session_status"]}"#
        );
        let down = ServerMsg::SessionStatus {
            session: "ses_1".into(),
            store: StoreStatus {
                state: StoreState::Unavailable,
                error: Some("disk full".into()),
                since: Some(Timestamp::from_unix_millis(1_000)),
                attempts: Some(3),
                unstored: 40,
            },
        };
        let text = down.encode();
        assert_eq!(
            text,
            r#"{"t":"session_status","session":"ses_1","store":{"state":"unavailable","error":"disk full","since":"1970-01-01T00:00:01.000Z","attempts":3,"unstored":40}}"#
        );
        assert_eq!(ServerMsg::decode(&text, 1 << 20).unwrap(), down);
        let up = ServerMsg::SessionStatus {
            session: "ses_1".into(),
            store: StoreStatus::available(0),
        };
        assert_eq!(
            up.encode(),
            r#"{"t":"session_status","session":"ses_1","store":{"state":"available","unstored":0}}"#
        );
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn versions_negotiate_to_the_newest_common_one() {
        assert_eq!(negotiate(&[1, 2, 3]), Some(1));
        assert_eq!(negotiate(&[9]), None);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn frames_never_exceed_the_limit_and_reassemble_in_order() {
        let big = "é\"\u{1}".repeat(5_000);
        let events = vec![event(1, "a"), event(2, &big), event(3, "b"), event(4, "c")];
        let frames = encode_events("s1", "e1", &events, MIN_MAX_FRAME);
        assert!(
            frames.iter().all(|f| f.text.len() <= MIN_MAX_FRAME),
            "a frame is over the limit"
        );
        let mut cursor = Cursor::default();
        let mut got = Vec::new();
        for f in &frames {
            match ServerMsg::decode(&f.text, MIN_MAX_FRAME).unwrap() {
                ServerMsg::Events { epoch, events, .. } => {
                    got.extend(cursor.accept(&epoch, events).events)
                }
                ServerMsg::EventPart {
                    epoch,
                    sequence,
                    index,
                    last,
                    text,
                    ..
                } => {
                    if let Some(e) = cursor.accept_part(sequence, index, last, text).unwrap() {
                        got.extend(cursor.accept(&epoch, vec![e]).events);
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, events);
    }

    #[wasm_bindgen_test(unsupported = test)]
    fn the_cursor_drops_replays_and_reports_gaps() {
        let mut c = Cursor::default();
        let a = c.accept("e1", vec![event(1, "a"), event(2, "b")]);
        assert_eq!((a.events.len(), a.duplicates, a.gap), (2, 0, None));
        let b = c.accept("e1", vec![event(2, "b"), event(3, "c"), event(5, "e")]);
        assert_eq!(b.events.len(), 1);
        assert_eq!(b.duplicates, 1);
        assert_eq!(
            b.gap,
            Some(Gap {
                after: 3,
                next_received: 5
            })
        );
        let other = c.accept("e2", vec![event(1, "x")]);
        assert!(other.events.is_empty() && other.gap.is_some());
        c.reset("e2");
        assert_eq!(c.accept("e2", vec![event(1, "x")]).events.len(), 1);
    }

    proptest! {
        /// However the log is cut into batches and replayed from earlier cursors, the client
        /// sees each event exactly once, in order.
        #[wasm_bindgen_test(unsupported = test)]
        fn replays_deliver_each_event_once(batches in proptest::collection::vec((0u64..30, 1u64..10), 1..40)) {
            let log: Vec<Event> = (1..=40).map(|s| event(s, "x")).collect();
            let mut c = Cursor::default();
            let mut delivered = Vec::new();
            for (from, len) in batches {
                // The server replays from some cursor at or before the client's (a resume).
                let from = from.min(c.after);
                let batch: Vec<Event> = log.iter().skip(from as usize).take(len as usize).cloned().collect();
                let acc = c.accept("e1", batch);
                prop_assert!(acc.gap.is_none());
                delivered.extend(acc.events);
            }
            let seqs: Vec<u64> = delivered.iter().map(Event::sequence).collect();
            let want: Vec<u64> = (1..=c.after).collect();
            prop_assert_eq!(seqs, want);
        }
    }
}
