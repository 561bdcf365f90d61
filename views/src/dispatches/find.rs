//! Finding dispatches in a session of a million: [`DispatchIndex`], the search text of every row
//! in one buffer, built once (and extended as rows arrive), and [`Finder`], which answers a filter
//! from the index and narrows its last answer when the person types on.
//!
//! A search is one scan of the buffer for the longest word (the standard library's substring
//! search over tens of megabytes, not a million small strings), then the other words and the
//! structured conditions on the rows it hit. A keystroke that only adds to the search text (the
//! usual case: typing) filters the last answer instead of the session. Nothing here draws.

use std::collections::{HashMap, HashSet};

use super::{DispatchRow, Filter};

/// The lower-case search text of every row, back to back, each followed by `'\n'`.
#[derive(Clone, Debug, Default)]
pub struct DispatchIndex {
    text: String,
    /// `starts[i]` is where row `i`'s text begins; one more entry, the buffer's end.
    starts: Vec<usize>,
    /// The report index of the first row indexed, to notice a session whose front was dropped.
    first_index: Option<u64>,
}

impl DispatchIndex {
    /// Rows indexed.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Whether no row is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Brings the index up to `rows`: appends the rows past those indexed, or indexes them again
    /// when the session is not the one indexed (fewer rows, or another first row).
    pub fn sync(&mut self, rows: &[DispatchRow]) {
        let first = rows.first().map(|r| r.index);
        if rows.len() < self.len() || (!self.is_empty() && first != self.first_index) {
            *self = Self::default();
        }
        if self.starts.is_empty() {
            self.starts.push(0);
            self.first_index = first;
        }
        for row in rows.iter().skip(self.len()) {
            row.write_search_text(&mut self.text);
            self.text.push('\n');
            self.starts.push(self.text.len());
        }
    }

    /// Row `pos`'s search text.
    pub fn text_of(&self, pos: usize) -> &str {
        match (self.starts.get(pos), self.starts.get(pos + 1)) {
            (Some(&a), Some(&b)) => self.text.get(a..b).unwrap_or(""),
            _ => "",
        }
    }

    /// The rows whose text contains `word`, in order, each once: one scan of the buffer.
    pub fn containing(&self, word: &str) -> Vec<usize> {
        let mut out = Vec::new();
        if word.is_empty() {
            return (0..self.len()).collect();
        }
        let mut row = 0usize;
        for (at, _) in self.text.match_indices(word) {
            // Hits come in order: walk the row cursor forward to the row holding `at`.
            while self.starts.get(row + 1).is_some_and(|&end| end <= at) {
                row += 1;
            }
            if out.last() != Some(&row) {
                out.push(row);
            }
        }
        out
    }
}

/// The search's words, lower case.
fn words(search: &str) -> Vec<String> {
    search
        .to_lowercase()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The last answer, and what it answered.
#[derive(Clone, Debug)]
struct Answer {
    filter: Filter,
    bookmarks: Vec<usize>,
    rows: usize,
    list: Vec<usize>,
}

/// Answers filters over a session's rows from its [`DispatchIndex`].
#[derive(Clone, Debug, Default)]
pub struct Finder {
    /// The search index.
    pub index: DispatchIndex,
    last: Option<Answer>,
    /// How the last answer was found (tests and the profiler).
    pub last_was_narrowed: bool,
}

impl Finder {
    /// The positions of the rows of `rows` that pass `filter`, in order. Answered from the last
    /// answer when nothing changed; from the rows that arrived since, when only rows were added;
    /// by narrowing the last answer when only the search text grew at its end; else from the index.
    pub fn find(&mut self, rows: &[DispatchRow], filter: &Filter, bookmarks: &[usize]) -> &[usize] {
        puffin::profile_function!();
        let had = self.index.len();
        let first_before = self.index.first_index;
        self.index.sync(rows);
        let reindexed = self.index.len() < had || self.index.first_index != first_before;
        let bookmarks = if filter.bookmarked {
            bookmarks.to_vec()
        } else {
            Vec::new()
        };
        let same_question = |a: &Answer| a.filter == *filter && a.bookmarks == bookmarks;
        let last = self.last.take().filter(|_| !reindexed);
        let list = match last {
            Some(a) if same_question(&a) && a.rows == rows.len() => a.list,
            Some(mut a) if same_question(&a) && a.rows < rows.len() => {
                let added = Self::check(rows, &self.index, filter, &bookmarks, a.rows..rows.len());
                a.list.extend(added);
                a.list
            }
            Some(a)
                if a.rows == rows.len()
                    && narrows(&a.filter, filter)
                    && a.bookmarks == bookmarks =>
            {
                self.last_was_narrowed = true;
                Self::check(rows, &self.index, filter, &bookmarks, a.list.into_iter())
            }
            _ => {
                self.last_was_narrowed = false;
                Self::search(rows, &self.index, filter, &bookmarks)
            }
        };
        let answer = self.last.insert(Answer {
            filter: filter.clone(),
            bookmarks,
            rows: rows.len(),
            list,
        });
        &answer.list
    }

    /// From the index: the rows holding the longest word, then every other condition on them.
    fn search(
        rows: &[DispatchRow],
        index: &DispatchIndex,
        filter: &Filter,
        bookmarks: &[usize],
    ) -> Vec<usize> {
        let ws = words(&filter.search);
        match ws.iter().max_by_key(|w| w.len()) {
            Some(longest) => {
                let hits = index.containing(longest);
                Self::check(rows, index, filter, bookmarks, hits.into_iter())
            }
            None => Self::check(rows, index, filter, bookmarks, 0..rows.len()),
        }
    }

    /// The positions among `candidates` whose rows pass every condition of `filter`.
    fn check(
        rows: &[DispatchRow],
        index: &DispatchIndex,
        filter: &Filter,
        bookmarks: &[usize],
        candidates: impl Iterator<Item = usize>,
    ) -> Vec<usize> {
        let ws = words(&filter.search);
        let marked: HashSet<usize> = bookmarks.iter().copied().collect();
        let program = filter
            .program
            .trim()
            .trim_start_matches("0x")
            .to_lowercase();
        // Programs are few: each one's hex text is matched once.
        let mut programs: HashMap<u64, bool> = HashMap::new();
        candidates
            .filter(|&pos| {
                let Some(row) = rows.get(pos) else {
                    return false;
                };
                if filter.mode.is_some_and(|m| m != row.mode)
                    || filter.rule.is_some_and(|r| !row.cites(r))
                    || (filter.has_escapes && row.counts.escapes == 0)
                    || (filter.bookmarked && !marked.contains(&pos))
                {
                    return false;
                }
                if !program.is_empty()
                    && !*programs
                        .entry(row.program)
                        .or_insert_with(|| format!("{:x}", row.program).contains(&program))
                {
                    return false;
                }
                let text = index.text_of(pos);
                ws.iter().all(|w| text.contains(w.as_str()))
            })
            .collect()
    }
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
    use dispatchscope_core::Rule;
    use dispatchscope_core::report::{Counts, Mode};

    fn rows(n: u64) -> Vec<DispatchRow> {
        (0..n)
            .map(|i| DispatchRow {
                index: i,
                program: 0x4000_0000 + (i % 7) * 0x1000,
                label: format!("Pass {} of frame {}", i % 13, i / 50),
                mode: [Mode::Bound, Mode::DeviceAddressed, Mode::Refused][(i % 3) as usize],
                counts: Counts {
                    escapes: usize::from(i % 11 == 0),
                    ..Counts::default()
                },
                rules: crate::dispatches::RuleSet::of(if i % 5 == 0 { &[Rule::O7] } else { &[] }),
                frame: i / 50,
            })
            .collect()
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

    #[test]
    fn answers_as_the_model_does_while_typing_and_as_rows_arrive() {
        let all = rows(3000);
        let mut finder = Finder::default();
        let mut f = Filter::default();
        let typed = "pass 1 of frame 2";
        for end in 0..=typed.len() {
            f.search = typed[..end].to_owned();
            let got = finder.find(&all, &f, &[]).to_vec();
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
        assert_eq!(finder.find(&all, &f, &[]).to_vec(), model(&all, &f, &[]));
        assert!(!finder.last_was_narrowed);
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
            assert_eq!(finder.find(&all, &f, &[]).to_vec(), model(&all, &f, &[]));
        }
        let marked = Filter {
            bookmarked: true,
            ..Filter::default()
        };
        assert_eq!(finder.find(&all, &marked, &[3, 99]).to_vec(), vec![3, 99]);
        // Rows arriving: the answer grows with them.
        let f = Filter {
            search: "of frame 5".into(),
            ..Filter::default()
        };
        let mut finder = Finder::default();
        for n in [0usize, 100, 1000, 3000] {
            assert_eq!(
                finder.find(&all[..n], &f, &[]).to_vec(),
                model(&all[..n], &f, &[])
            );
        }
        // A session whose front was dropped is indexed again.
        assert_eq!(
            finder.find(&all[500..], &f, &[]).to_vec(),
            model(&all[500..], &f, &[])
        );
    }

    #[test]
    fn the_index_finds_a_word_across_row_ends_only_within_rows() {
        let all = rows(10);
        let mut index = DispatchIndex::default();
        index.sync(&all);
        assert_eq!(index.len(), 10);
        // "\n" separates rows: a word never matches across two of them.
        assert!(index.containing("o7\n1").is_empty() || words("o7\n1").len() == 2);
        assert_eq!(index.containing("pass 3 "), vec![3]);
        assert_eq!(index.text_of(3), all[3].search_text() + "\n");
    }
}
