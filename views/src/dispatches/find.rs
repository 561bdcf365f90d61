//! Finding dispatches in a session of a million or ten: [`Finder`] answers a [`Filter`] over
//! [`Rows`] without a search text per row, and narrows or extends its last answer when it can.
//!
//! A row's search text is its report index, a space, then its signature's text (program, label,
//! mode, rule ids), and a search word has no space in it; so a word is in a row's text exactly
//! when it is in the signature's text or in the index's digits. A search therefore asks each
//! signature once (a game repeats a few hundred of them over millions of dispatches): no, yes, or
//! "only if the index holds these digits"; then one pass over the rows' signature numbers, with
//! the index's digits formatted only for rows whose signature left a word of digits open. A
//! keystroke that only adds to the search text (typing on) filters the last answer instead of the
//! session; rows that arrive are checked alone. With no condition set, the answer is every row,
//! and no list is made. Nothing here draws.

use std::collections::HashSet;

use super::{Filter, Rows};

/// The search's words, lower case.
fn words(search: &str) -> Vec<String> {
    search
        .to_lowercase()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The rows a filter lets through: every row, or a list of positions in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum List {
    /// Every row held: positions `first..len`.
    All(usize, usize),
    Some(Vec<u32>),
}

/// The rows that pass, as positions in the session, in order.
#[derive(Clone, Copy, Debug)]
pub struct Shown<'a> {
    list: &'a List,
}

impl Shown<'_> {
    /// How many pass.
    pub fn len(&self) -> usize {
        match self.list {
            List::All(first, n) => n - first,
            List::Some(v) => v.len(),
        }
    }

    /// Whether none does.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The position in the session of the `i`th that passes.
    pub fn get(&self, i: usize) -> Option<usize> {
        match self.list {
            List::All(first, n) => (first + i < *n).then_some(first + i),
            List::Some(v) => v.get(i).map(|&p| p as usize),
        }
    }

    /// Where position `pos` is among those that pass, if it passes.
    pub fn position_of(&self, pos: usize) -> Option<usize> {
        match self.list {
            List::All(first, n) => (*first..*n).contains(&pos).then(|| pos - first),
            List::Some(v) => v.binary_search(&u32::try_from(pos).ok()?).ok(),
        }
    }

    /// The positions, in order.
    pub fn to_vec(&self) -> Vec<usize> {
        (0..self.len()).filter_map(|i| self.get(i)).collect()
    }
}

/// The last answer, and what it answered.
#[derive(Clone, Debug)]
struct Answer {
    filter: Filter,
    bookmarks: Vec<usize>,
    rows_id: u64,
    /// The first row held when it answered (a release makes the question new).
    rows_first: usize,
    rows: usize,
    list: List,
}

/// What a signature says of a search: no row of it passes, every one does (as far as the
/// signature goes), or those whose index holds every one of these words (each all digits).
#[derive(Clone, Debug)]
enum SigAnswer {
    No,
    Yes,
    Digits(Vec<DigitWord>),
}

/// A search word of digits only, as a number: `value` occurs in an index's decimal digits when
/// some `index / 10^j` at least `low` (the word's digits all inside the number) is `value`
/// modulo `span`. A word with a leading zero (or too long for a `u64`) is matched as text.
#[derive(Clone, Debug)]
struct DigitWord {
    text: String,
    number: Option<(u64, u64, u64)>,
}

impl DigitWord {
    fn new(text: String) -> Self {
        let number = (!text.starts_with('0') && text.len() <= 19)
            .then(|| text.parse::<u64>().ok())
            .flatten()
            .map(|value| {
                let span = 10u64.pow(text.len() as u32);
                (value, span / 10, span)
            });
        Self { text, number }
    }

    /// Whether `index`'s decimal digits hold the word (`buf` is scratch for the text form).
    fn in_index(&self, index: u64, buf: &mut [u8; 20]) -> bool {
        match self.number {
            // An index below 2^32 (every session's, in practice) in 32 bits: a 32-bit division
            // costs a fraction of a 64-bit one, and a digits search divides a few times a row.
            Some((value, low, span)) => match (
                u32::try_from(index),
                u32::try_from(value),
                u32::try_from(low),
                u32::try_from(span),
            ) {
                (Ok(m), Ok(value), Ok(low), Ok(span)) => in_digits(m, value, low, span),
                _ => in_digits(index, value, low, span),
            },
            None => holds(decimal(index, buf), self.text.as_bytes()),
        }
    }
}

/// Answers filters over a session's [`Rows`]; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Finder {
    last: Option<Answer>,
    /// How the last answer was found (tests and the profiler).
    pub last_was_narrowed: bool,
    /// How many rows the last answer looked at (tests: typing on and rows arriving look at few).
    pub last_rows_checked: usize,
}

impl Finder {
    /// The positions of the rows of `rows` that pass `filter`, in order. Answered from the last
    /// answer when nothing changed; from the rows that arrived since, when only rows were added;
    /// by narrowing the last answer when only the search text grew at its end; else by one pass.
    pub fn find(&mut self, rows: &Rows, filter: &Filter, bookmarks: &[usize]) -> Shown<'_> {
        puffin::profile_function!();
        let bookmarks = if filter.bookmarked {
            bookmarks.to_vec()
        } else {
            Vec::new()
        };
        let same_question = |a: &Answer| a.filter == *filter && a.bookmarks == bookmarks;
        let last = self.last.take().filter(|a| {
            a.rows_id == rows.id() && a.rows <= rows.len() && a.rows_first == rows.first()
        });
        self.last_rows_checked = 0;
        let list = match last {
            Some(a) if same_question(&a) && a.rows == rows.len() => a.list,
            Some(a) if same_question(&a) => match a.list {
                List::All(first, _) => List::All(first, rows.len()),
                List::Some(mut v) => {
                    let added = self.check(
                        rows,
                        filter,
                        &bookmarks,
                        Candidates::Range(a.rows..rows.len()),
                    );
                    v.extend(added);
                    List::Some(v)
                }
            },
            Some(a)
                if a.rows == rows.len()
                    && narrows(&a.filter, filter)
                    && a.bookmarks == bookmarks =>
            {
                self.last_was_narrowed = true;
                match a.list {
                    List::All(first, n) => {
                        let all = Candidates::Range(first..n);
                        List::Some(self.check(rows, filter, &bookmarks, all))
                    }
                    List::Some(v) => {
                        List::Some(self.check(rows, filter, &bookmarks, Candidates::List(v)))
                    }
                }
            }
            _ => {
                self.last_was_narrowed = false;
                if filter.is_active() {
                    List::Some(self.check(
                        rows,
                        filter,
                        &bookmarks,
                        Candidates::Range(rows.first()..rows.len()),
                    ))
                } else {
                    List::All(rows.first(), rows.len())
                }
            }
        };
        let answer = self.last.insert(Answer {
            filter: filter.clone(),
            bookmarks,
            rows_id: rows.id(),
            rows_first: rows.first(),
            rows: rows.len(),
            list,
        });
        Shown { list: &answer.list }
    }

    /// The positions among `candidates` whose rows pass every condition of `filter`.
    fn check(
        &mut self,
        rows: &Rows,
        filter: &Filter,
        bookmarks: &[usize],
        candidates: Candidates,
    ) -> Vec<u32> {
        let ws = words(&filter.search);
        let program = filter
            .program
            .trim()
            .trim_start_matches("0x")
            .to_lowercase();
        // Each signature once.
        let sigs: Vec<SigAnswer> = rows
            .signatures()
            .map(|(sig, text)| {
                if filter.mode.is_some_and(|m| m != sig.mode)
                    || filter.rule.is_some_and(|r| !sig.rules.contains(r))
                    || (!program.is_empty() && !format!("{:x}", sig.program).contains(&program))
                {
                    return SigAnswer::No;
                }
                let open: Vec<String> = ws
                    .iter()
                    .filter(|w| !text.contains(w.as_str()))
                    .cloned()
                    .collect();
                if open.is_empty() {
                    SigAnswer::Yes
                } else if open.iter().all(|w| w.bytes().all(|b| b.is_ascii_digit())) {
                    SigAnswer::Digits(open.into_iter().map(DigitWord::new).collect())
                } else {
                    SigAnswer::No
                }
            })
            .collect();
        let pass = Pass {
            rows,
            filter,
            sigs,
            marked: bookmarks.iter().copied().collect(),
        };
        let (out, checked) = match candidates {
            Candidates::Range(range) if range.len() >= PARALLEL_ROWS => pass.split(range),
            Candidates::Range(range) => pass.run(range),
            Candidates::List(list) => pass.run(list.into_iter().map(|p| p as usize)),
        };
        self.last_rows_checked += checked;
        out
    }
}

/// Rows a search from scratch looks at before it splits them over the machine's cores.
const PARALLEL_ROWS: usize = 1 << 20;

/// The rows a check looks at: a span of positions, or the last answer's.
enum Candidates {
    Range(std::ops::Range<usize>),
    List(Vec<u32>),
}

/// One check's question, asked of rows by [`Pass::run`] (on any thread: it only reads).
struct Pass<'a> {
    rows: &'a Rows,
    filter: &'a Filter,
    sigs: Vec<SigAnswer>,
    marked: HashSet<usize>,
}

impl Pass<'_> {
    /// `range` split into one span a core, each checked on a thread of its own; the answers in
    /// order, and the rows looked at.
    fn split(&self, range: std::ops::Range<usize>) -> (Vec<u32>, usize) {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let step = range.len().div_ceil(threads.max(1));
        let spans: Vec<_> = (range.start..range.end)
            .step_by(step.max(1))
            .map(|a| a..(a + step).min(range.end))
            .collect();
        let parts: Vec<(Vec<u32>, usize)> = std::thread::scope(|scope| {
            let handles: Vec<_> = spans
                .into_iter()
                .map(|span| scope.spawn(move || self.run(span)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        let mut out = Vec::with_capacity(parts.iter().map(|(v, _)| v.len()).sum());
        let mut checked = 0;
        for (v, n) in parts {
            out.extend(v);
            checked += n;
        }
        (out, checked)
    }

    /// The positions among `candidates` whose rows pass, and how many were looked at.
    fn run(&self, candidates: impl Iterator<Item = usize>) -> (Vec<u32>, usize) {
        let (rows, filter) = (self.rows, self.filter);
        let sig_of = rows.sig_column();
        let runs = rows.index_runs();
        let mut digits = [0u8; 20];
        let mut checked = 0usize;
        // The run of indices the last row looked up was in: consecutive rows mostly share it.
        let mut run: Option<(usize, u64, u64)> = None;
        let out = candidates
            .filter(|&pos| {
                checked += 1;
                let held = pos.checked_sub(rows.first()).and_then(|i| sig_of.get(i));
                let Some(answer) = held.and_then(|&s| self.sigs.get(s as usize)) else {
                    return false;
                };
                if matches!(answer, SigAnswer::No)
                    || (filter.has_escapes && !rows.has_escapes(pos))
                    || (filter.bookmarked && !self.marked.contains(&pos))
                {
                    return false;
                }
                match answer {
                    SigAnswer::Digits(open) => {
                        let p = pos as u64;
                        let here = run.filter(|&(i, first, _)| {
                            p >= first && runs.get(i + 1).is_none_or(|(next, _)| p < *next)
                        });
                        let (i, first, at) = match here {
                            Some(r) => r,
                            None => {
                                let i = runs.partition_point(|(q, _)| *q <= p);
                                let Some(i) = i.checked_sub(1) else {
                                    return false;
                                };
                                let (first, at) = runs[i];
                                (i, first, at)
                            }
                        };
                        run = Some((i, first, at));
                        let index = at.wrapping_add(p - first);
                        open.iter().all(|w| w.in_index(index, &mut digits))
                    }
                    _ => true,
                }
            })
            .filter_map(|p| u32::try_from(p).ok())
            .collect();
        (out, checked)
    }
}

/// Whether some `m / 10^j` at least `low` is `value` modulo `span` ([`DigitWord`]).
fn in_digits<T>(mut m: T, value: T, low: T, span: T) -> bool
where
    T: Copy + PartialOrd + std::ops::Rem<Output = T> + std::ops::Div<Output = T> + From<u8>,
{
    while m >= low {
        if m % span == value {
            return true;
        }
        m = m / T::from(10);
    }
    false
}

/// `n` in decimal, written into the end of `buf` (what `format!("{n}")` gives, without the
/// formatting machinery: a digits search formats an index for every row it looks at).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Whether `word` occurs in `text` (both at most 20 bytes: a byte loop, not a `memcmp` call a
/// window).
fn holds(text: &[u8], word: &[u8]) -> bool {
    word.is_empty()
        || text
            .windows(word.len())
            .any(|w| w.iter().zip(word).all(|(a, b)| a == b))
}

/// Whether every row passing `new` passes `old`, because only the search text changed and it grew
/// at its end (typing on).
fn narrows(old: &Filter, new: &Filter) -> bool {
    let same_rest = Filter {
        search: String::new(),
        ..old.clone()
    } == Filter {
        search: String::new(),
        ..new.clone()
    };
    same_rest
        && new
            .search
            .to_lowercase()
            .starts_with(&old.search.to_lowercase())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::dispatches::{DispatchRow, RowCounts, RuleSet};
    use dispatchscope_core::Rule;
    use dispatchscope_core::report::Mode;

    #[test]
    fn decimal_is_what_format_writes_and_holds_finds_words() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 99, 1_000_003, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
        assert!(holds(b"1700", b"70"));
        assert!(holds(b"1700", b""));
        assert!(!holds(b"17", b"170"));
        assert!(!holds(b"1700", b"71"));
        let mut buf = [0u8; 20];
        for word in [
            "0",
            "7",
            "70",
            "017",
            "1700",
            "4321",
            "99999999999999999999",
        ] {
            let w = DigitWord::new(word.into());
            for n in [
                0u64,
                7,
                17,
                70,
                170,
                1700,
                10_170,
                43_210,
                4321,
                1_004_321,
                u64::MAX,
            ] {
                assert_eq!(
                    w.in_index(n, &mut buf),
                    n.to_string().contains(word),
                    "{word:?} in {n}"
                );
            }
        }
    }

    fn rows(n: u64) -> Vec<DispatchRow> {
        (0..n)
            .map(|i| DispatchRow {
                // A gap in the indices, as a target that dropped some makes.
                index: if i < 1000 { i } else { i + 500 },
                program: 0x4000_0000 + (i % 7) * 0x1000,
                label: format!("Pass {} of frame {}", i % 13, i / 50),
                mode: [Mode::Bound, Mode::DeviceAddressed, Mode::Refused][(i % 3) as usize],
                counts: RowCounts {
                    escapes: u32::from(i % 11 == 0),
                    ..RowCounts::default()
                },
                rules: RuleSet::of(if i % 5 == 0 { &[Rule::O7] } else { &[] }),
                frame: i / 50,
            })
            .collect()
    }

    fn columns(rows: &[DispatchRow]) -> Rows {
        let mut r = Rows::new();
        r.extend(rows);
        r
    }

    /// The slow model: every row's own text and conditions, one by one.
    fn model(rows: &[DispatchRow], f: &Filter, bookmarks: &[usize]) -> Vec<usize> {
        let ws = words(&f.search);
        let program = f.program.trim().trim_start_matches("0x").to_lowercase();
        (0..rows.len())
            .filter(|&p| {
                let r = &rows[p];
                let text = r.search_text();
                f.mode.is_none_or(|m| m == r.mode)
                    && f.rule.is_none_or(|x| r.cites(x))
                    && (!f.has_escapes || r.counts.escapes > 0)
                    && (!f.bookmarked || bookmarks.contains(&p))
                    && (program.is_empty() || format!("{:x}", r.program).contains(&program))
                    && ws.iter().all(|w| text.contains(w.as_str()))
            })
            .collect()
    }

    /// A search over more rows than [`PARALLEL_ROWS`] is split over threads: its answer is the
    /// model's, in order, for text, digits and filters alike.
    #[test]
    fn a_search_split_over_threads_answers_as_the_model_does() {
        let rows = rows(PARALLEL_ROWS as u64 + 4321);
        let cols = columns(&rows);
        for f in [
            Filter {
                search: "77".into(),
                ..Filter::default()
            },
            Filter {
                search: "pass 1 0".into(),
                ..Filter::default()
            },
            Filter {
                has_escapes: true,
                search: "9".into(),
                ..Filter::default()
            },
        ] {
            let mut finder = Finder::default();
            let got = finder.find(&cols, &f, &[]).to_vec();
            assert_eq!(finder.last_rows_checked, rows.len());
            assert_eq!(got, model(&rows, &f, &[]), "{f:?}");
        }
    }

    #[test]
    fn answers_as_the_model_does_while_typing_and_as_rows_arrive() {
        let all = rows(3000);
        let cols = columns(&all);
        let mut finder = Finder::default();
        let mut f = Filter::default();
        let typed = "pass 1 of frame 2";
        for end in 0..=typed.len() {
            f.search = typed[..end].to_owned();
            let got = finder.find(&cols, &f, &[]).to_vec();
            assert_eq!(got, model(&all, &f, &[]), "search {:?}", f.search);
            if end > 0 {
                assert!(
                    finder.last_was_narrowed,
                    "typing on narrows: {:?}",
                    f.search
                );
            }
        }
        // Upper case, and a search from scratch (a word removed).
        f.search = "PASS 12".into();
        assert_eq!(finder.find(&cols, &f, &[]).to_vec(), model(&all, &f, &[]));
        assert!(!finder.last_was_narrowed);
        // Digits that only an index holds, with and without other words; digits that span the
        // index and nothing else.
        for search in ["1999", "150", "pass 1 77", "0x4000", "2 of", "1500", "1000"] {
            f.search = search.into();
            assert_eq!(
                finder.find(&cols, &f, &[]).to_vec(),
                model(&all, &f, &[]),
                "{search}"
            );
        }
        // Structured conditions.
        for (mode, rule, esc, program) in [
            (Some(Mode::Refused), None, false, ""),
            (None, Some(Rule::O7), true, ""),
            (None, None, false, "0x40002"),
        ] {
            let f = Filter {
                mode,
                rule,
                has_escapes: esc,
                program: program.into(),
                search: "pass".into(),
                ..Filter::default()
            };
            assert_eq!(finder.find(&cols, &f, &[]).to_vec(), model(&all, &f, &[]));
        }
        let marked = Filter {
            bookmarked: true,
            ..Filter::default()
        };
        assert_eq!(finder.find(&cols, &marked, &[3, 99]).to_vec(), vec![3, 99]);
        // Rows arriving: the answer grows with them, and only the new rows are looked at.
        let f = Filter {
            search: "of frame 5".into(),
            ..Filter::default()
        };
        let mut finder = Finder::default();
        let mut growing = Rows::new();
        let mut at = 0;
        for n in [0usize, 100, 1000, 3000] {
            growing.extend(&all[at..n]);
            let got = finder.find(&growing, &f, &[]).to_vec();
            assert_eq!(got, model(&all[..n], &f, &[]));
            if at > 0 {
                assert_eq!(finder.last_rows_checked, n - at, "only the new rows");
            }
            at = n;
        }
        // Other rows (another session) are answered afresh.
        let other = columns(&all[500..]);
        assert_eq!(
            finder.find(&other, &f, &[]).to_vec(),
            model(&all[500..], &f, &[])
        );
    }

    #[test]
    fn no_condition_lists_every_row_without_a_list() {
        let cols = columns(&rows(5000));
        let mut finder = Finder::default();
        let shown = finder.find(&cols, &Filter::default(), &[]);
        assert_eq!(shown.len(), 5000);
        assert_eq!(shown.get(4999), Some(4999));
        assert_eq!(shown.position_of(1234), Some(1234));
        assert_eq!(finder.last_rows_checked, 0);
    }
}
