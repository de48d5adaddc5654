//! Token counting and pruning so a conversation fits the model's context window.
//!
//! Pruning never touches the stored history: it chooses which messages go into one request.
//! The system prompt and the newest turns are always kept, and an assistant message that
//! called tools is kept or dropped together with its tool results, because a request with a
//! tool result whose call is missing (or the reverse) is rejected by servers.

use serde::{Deserialize, Serialize};

use crate::config::{ContextConfig, PruneStrategy};
use crate::messages::Message;

/// Counts tokens with the model's tokenizer when it is known, or estimates.
#[derive(Clone)]
pub enum Tokenizer {
    /// A real BPE tokenizer (OpenAI-family models).
    Bpe {
        /// The encoding name, e.g. `o200k_base`.
        name: &'static str,
        /// The encoder.
        bpe: &'static tiktoken_rs::CoreBPE,
    },
    /// About four characters per token, for models whose tokenizer is not bundled.
    Estimate,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Tokenizer {
    /// Chooses from the `context.tokenizer` setting and the model name.
    pub fn new(setting: &str, model: &str) -> Self {
        let named = |name: &str| -> Option<Tokenizer> {
            match name {
                "cl100k_base" => Some(Tokenizer::Bpe {
                    name: "cl100k_base",
                    bpe: tiktoken_rs::cl100k_base_singleton(),
                }),
                "o200k_base" => Some(Tokenizer::Bpe {
                    name: "o200k_base",
                    bpe: tiktoken_rs::o200k_base_singleton(),
                }),
                _ => None,
            }
        };
        match setting {
            "estimate" => Tokenizer::Estimate,
            "auto" => match tiktoken_rs::tokenizer::get_tokenizer(model) {
                Some(tiktoken_rs::tokenizer::Tokenizer::O200kBase) => named("o200k_base"),
                Some(tiktoken_rs::tokenizer::Tokenizer::Cl100kBase) => named("cl100k_base"),
                _ => None,
            }
            .unwrap_or(Tokenizer::Estimate),
            other => named(other).unwrap_or(Tokenizer::Estimate),
        }
    }

    /// The tokenizer's name, for the transcript.
    pub fn name(&self) -> &'static str {
        match self {
            Tokenizer::Bpe { name, .. } => name,
            Tokenizer::Estimate => "estimate",
        }
    }

    /// Tokens in a text.
    pub fn count(&self, text: &str) -> usize {
        match self {
            Tokenizer::Bpe { bpe, .. } => bpe.encode_ordinary(text).len(),
            Tokenizer::Estimate => text.chars().count().div_ceil(4),
        }
    }

    /// Tokens a message costs in a request, including the per-message overhead.
    pub fn message(&self, m: &Message) -> usize {
        let mut n = 4 + self.count(m.content());
        if let Message::Assistant { tool_calls, .. } = m {
            for c in tool_calls {
                n += 4 + self.count(&c.name) + self.count(&c.arguments);
            }
        }
        n
    }
}

/// Which messages go into a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunePlan {
    /// Indices of kept messages, ascending.
    pub kept: Vec<usize>,
    /// Indices of dropped messages, ascending.
    pub dropped: Vec<usize>,
    /// Tokens of the kept messages.
    pub kept_tokens: usize,
    /// Tokens of the dropped messages.
    pub dropped_tokens: usize,
    /// False when even the newest turn alone exceeds the budget.
    pub fits: bool,
}

struct Block {
    start: usize,
    end: usize,
    turn: usize,
    tokens: usize,
    user: bool,
}

/// Splits the history into whole turns: a user message with everything that answered it
/// (assistant messages, tool calls and their results). Pruning drops whole turns, so the kept
/// history still alternates user / assistant — chat templates of many local models (Mistral,
/// Llama, Gemma) reject a conversation that starts with an assistant message or has two user
/// messages in a row — and a tool call is never separated from its result.
fn blocks(messages: &[Message], tok: &Tokenizer) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut turn = 0usize;
    for (i, m) in messages.iter().enumerate() {
        let t = tok.message(m);
        let user = matches!(m, Message::User { .. });
        match out.last_mut() {
            Some(b) if !user => {
                b.end = i + 1;
                b.tokens += t;
            }
            _ => {
                if user {
                    turn += 1;
                }
                out.push(Block {
                    start: i,
                    end: i + 1,
                    turn,
                    tokens: t,
                    user,
                });
            }
        }
    }
    out
}

/// Chooses the messages that fit in `budget` tokens.
pub fn prune(
    messages: &[Message],
    budget: usize,
    config: &ContextConfig,
    tok: &Tokenizer,
) -> PrunePlan {
    let blocks = blocks(messages, tok);
    let turns = blocks.last().map(|b| b.turn).unwrap_or(0);
    let protect_from = turns.saturating_sub(config.keep_last_turns.max(1)) + 1;
    let mut dropped = vec![false; blocks.len()];
    let mut total: usize = blocks.iter().map(|b| b.tokens).sum();
    let fits = |total: usize| total <= budget;
    if !fits(total) {
        let candidates: Vec<usize> = (0..blocks.len())
            .filter(|&i| blocks[i].turn < protect_from)
            .collect();
        let order: Vec<usize> = match config.strategy {
            PruneStrategy::OldestFirst => candidates,
            PruneStrategy::KeepLastTurns => candidates,
            PruneStrategy::MiddleOut => {
                // Keep the first turn (the task); drop from the middle outwards.
                let c: Vec<usize> = candidates
                    .into_iter()
                    .filter(|&i| !(i == 0 && blocks[i].user))
                    .collect();
                let mut order = Vec::with_capacity(c.len());
                if !c.is_empty() {
                    let mid = c.len() / 2;
                    order.push(c[mid]);
                    for k in 1..=c.len() {
                        if mid >= k {
                            order.push(c[mid - k]);
                        }
                        if mid + k < c.len() {
                            order.push(c[mid + k]);
                        }
                    }
                }
                order
            }
        };
        let drop_all = config.strategy == PruneStrategy::KeepLastTurns;
        for &i in &order {
            if !drop_all && fits(total) {
                break;
            }
            dropped[i] = true;
            total -= blocks[i].tokens;
        }
        // Oldest-first, the cut moves in steps of a quarter of the budget: what goes is
        // rounded up to the next step, so the requests after this one keep the same cut (and
        // the model server's cached prefix, and the summary of what went) until the history
        // has grown by that much again.
        if config.strategy == PruneStrategy::OldestFirst {
            let step = (budget / 4).max(1);
            let gone: usize = blocks.iter().map(|b| b.tokens).sum::<usize>() - total;
            let target = gone.div_ceil(step) * step;
            for &i in &order {
                if blocks.iter().map(|b| b.tokens).sum::<usize>() - total >= target {
                    break;
                }
                if !dropped[i] {
                    dropped[i] = true;
                    total -= blocks[i].tokens;
                }
            }
        }
        // Still too big: drop older protected turns, never the newest one.
        if !fits(total) {
            for i in 0..blocks.len() {
                if fits(total) {
                    break;
                }
                if !dropped[i] && blocks[i].turn < turns {
                    dropped[i] = true;
                    total -= blocks[i].tokens;
                }
            }
        }
    }
    let mut plan = PrunePlan {
        kept: Vec::new(),
        dropped: Vec::new(),
        kept_tokens: 0,
        dropped_tokens: 0,
        fits: fits(total),
    };
    for (b, d) in blocks.iter().zip(dropped) {
        if d {
            plan.dropped.extend(b.start..b.end);
            plan.dropped_tokens += b.tokens;
        } else {
            plan.kept.extend(b.start..b.end);
            plan.kept_tokens += b.tokens;
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ToolCall;

    fn history(turns: usize) -> Vec<Message> {
        let mut h = Vec::new();
        for t in 0..turns {
            h.push(Message::user(format!("question {t} {}", "x".repeat(40))));
            h.push(Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: format!("c{t}"),
                    name: "tool".into(),
                    arguments: "{}".into(),
                }],
                partial: false,
            });
            h.push(Message::Tool {
                tool_call_id: format!("c{t}"),
                name: "tool".into(),
                content: "y".repeat(80),
                is_error: false,
                kept: None,
            });
            h.push(Message::assistant(format!("answer {t} {}", "z".repeat(40))));
        }
        h
    }

    fn cfg(strategy: PruneStrategy, keep: usize) -> ContextConfig {
        ContextConfig {
            strategy,
            keep_last_turns: keep,
            ..ContextConfig::default()
        }
    }

    fn calls_paired(h: &[Message], kept: &[usize]) -> bool {
        kept.iter().all(|&i| match &h[i] {
            Message::Tool { .. } => {
                kept.contains(&(i - 1)) || matches!(h[i - 1], Message::Tool { .. })
            }
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                kept.contains(&(i + 1))
            }
            _ => true,
        })
    }

    #[test]
    fn nothing_dropped_when_it_fits() {
        let h = history(3);
        let plan = prune(
            &h,
            100_000,
            &cfg(PruneStrategy::OldestFirst, 1),
            &Tokenizer::Estimate,
        );
        assert!(plan.dropped.is_empty() && plan.fits);
        assert_eq!(plan.kept.len(), h.len());
    }

    #[test]
    fn oldest_first_drops_oldest_and_keeps_pairs() {
        let h = history(5);
        let tok = Tokenizer::Estimate;
        let per_turn: usize = h[..4].iter().map(|m| tok.message(m)).sum();
        let plan = prune(&h, per_turn * 3, &cfg(PruneStrategy::OldestFirst, 1), &tok);
        assert!(plan.fits);
        // Two turns must go; the cut moves in steps of a quarter of the budget (0.75 turn
        // here), so a third goes too.
        assert_eq!(plan.dropped, (0..12).collect::<Vec<_>>());
        assert!(calls_paired(&h, &plan.kept));
    }

    #[test]
    fn as_the_history_grows_the_oldest_first_cut_moves_rarely_and_in_steps() {
        let tok = Tokenizer::Estimate;
        let per_turn: usize = history(1).iter().map(|m| tok.message(m)).sum();
        let budget = per_turn * 12;
        let full = history(40);
        let mut cuts = Vec::new();
        // One request per message added, from 13 turns on.
        for len in 13 * 4..=full.len() {
            let h = &full[..len];
            let plan = prune(h, budget, &cfg(PruneStrategy::OldestFirst, 1), &tok);
            assert!(plan.fits, "{len}");
            // Never more than a step and a turn beyond what had to go.
            assert!(plan.kept_tokens + budget / 4 + per_turn >= budget, "{len}");
            cuts.push(plan.dropped.len());
        }
        let moves = cuts.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(cuts.windows(2).all(|w| w[0] <= w[1]), "{cuts:?}");
        // 27 turns of growth: dropping only what must go would move the cut 27 times; in
        // steps of three turns it moves about a third as often.
        assert!((5..=10).contains(&moves), "{moves} moves: {cuts:?}");
    }

    #[test]
    fn middle_out_keeps_task_and_newest() {
        let h = history(5);
        let tok = Tokenizer::Estimate;
        let per_turn: usize = h[..4].iter().map(|m| tok.message(m)).sum();
        let plan = prune(&h, per_turn * 3, &cfg(PruneStrategy::MiddleOut, 1), &tok);
        assert!(plan.fits);
        assert!(plan.kept.contains(&0), "the first user message is kept");
        assert!(plan.kept.contains(&(h.len() - 1)));
        assert!(!plan.dropped.contains(&0));
        assert!(
            plan.dropped.iter().any(|&i| (8..12).contains(&i)),
            "{:?}",
            plan.dropped
        );
        assert!(calls_paired(&h, &plan.kept));
    }

    #[test]
    fn keep_last_turns_drops_everything_older() {
        let h = history(5);
        let tok = Tokenizer::Estimate;
        let total: usize = h.iter().map(|m| tok.message(m)).sum();
        let plan = prune(&h, total - 1, &cfg(PruneStrategy::KeepLastTurns, 2), &tok);
        assert_eq!(plan.kept, (12..20).collect::<Vec<_>>());
    }

    #[test]
    fn newest_turn_is_kept_even_when_over_budget() {
        let h = history(2);
        let plan = prune(
            &h,
            10,
            &cfg(PruneStrategy::OldestFirst, 2),
            &Tokenizer::Estimate,
        );
        assert!(!plan.fits);
        assert_eq!(plan.kept, (4..8).collect::<Vec<_>>());
    }

    #[test]
    fn kept_history_alternates_and_starts_with_the_user() {
        let h = history(6);
        let tok = Tokenizer::Estimate;
        let per_turn: usize = h[..4].iter().map(|m| tok.message(m)).sum();
        for strategy in [
            PruneStrategy::OldestFirst,
            PruneStrategy::MiddleOut,
            PruneStrategy::KeepLastTurns,
        ] {
            for budget in [per_turn * 2 + 5, per_turn * 3 + 17, per_turn * 4 + 33] {
                let plan = prune(&h, budget, &cfg(strategy, 1), &tok);
                let kept: Vec<&Message> = plan.kept.iter().map(|&i| &h[i]).collect();
                assert!(
                    matches!(kept.first(), Some(Message::User { .. })),
                    "{strategy:?} at {budget}: starts with {:?}",
                    kept.first()
                );
                let users_in_a_row = kept.windows(2).any(|w| {
                    matches!(w[0], Message::User { .. }) && matches!(w[1], Message::User { .. })
                });
                assert!(!users_in_a_row, "{strategy:?} at {budget}");
                assert!(calls_paired(&h, &plan.kept), "{strategy:?} at {budget}");
            }
        }
    }

    #[test]
    fn real_tokenizer_for_openai_models() {
        let t = Tokenizer::new("auto", "gpt-4o");
        assert_eq!(t.name(), "o200k_base");
        assert_eq!(t.count("hello world"), 2);
        assert_eq!(Tokenizer::new("auto", "qwen2.5").name(), "estimate");
        assert_eq!(
            Tokenizer::new("cl100k_base", "qwen2.5").name(),
            "cl100k_base"
        );
        assert_eq!(Tokenizer::Estimate.count("abcdefgh"), 2);
    }
}
