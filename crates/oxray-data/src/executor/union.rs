//! Unions: their inputs' outputs, one input after the other (an input behind
//! the current one does not run yet).

use super::{Executor, Kind};

impl Executor {
    pub(super) fn step_union(&mut self, op: usize) -> bool {
        let mut moved = false;
        loop {
            let Kind::Union { current } = self.ops[op].kind else { unreachable!() };
            let Some(&input) = self.ops[op].inputs.get(current) else {
                self.finish(op);
                return true;
            };
            while let Some(bundle) = self.ops[input].out.pop_front() {
                self.ops[op].out.push_back(bundle);
                moved = true;
            }
            if !self.exhausted(input) {
                return moved;
            }
            let Kind::Union { current } = &mut self.ops[op].kind else { unreachable!() };
            *current += 1;
            moved = true;
        }
    }
}
