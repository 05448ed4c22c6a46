//! Turn lifecycle projection (being written).
use super::event::Event;
#[derive(Default, Clone, Debug)]
pub struct LifecycleConfig;
pub struct TurnProjector;
impl TurnProjector {
    pub fn new(_config: LifecycleConfig) -> Self {
        TurnProjector
    }
    pub fn handle_event(&mut self, _event: &Event, _now_ms: i64) {}
    pub fn render(&self) -> String {
        String::new()
    }
}
