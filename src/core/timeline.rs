//! Timeline projection (being written).
use super::event::Event;
#[derive(Default)]
pub struct Timeline;
impl Timeline {
    pub fn new() -> Self {
        Timeline
    }
    pub fn handle_event(&mut self, _event: &Event) {}
    pub fn render(&self) -> String {
        String::new()
    }
}
