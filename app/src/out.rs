//! The one writer of every subcommand's output: standard output, where a reader that stopped
//! reading (`dispatchscope explain … | head`) ends the subcommand quietly instead of a panic.
//!
//! `println!` panics when standard output is a closed pipe (Rust ignores `SIGPIPE`, so the write
//! fails with `EPIPE`); here every write is a `Result`, a closed pipe is [`Closed`], and
//! [`crate::command::run`] ends a subcommand that met it with exit status 0 and nothing on stderr
//! (`diff` keeps its own status: the comparison was made before it was printed). Any other write
//! failure is an error in words, as before.
//!
//! [`outln!`](crate::outln) and [`out!`](crate::out) write a line or text; [`Stdout`] is the same
//! writer buffered for a long output ([`stdout`]); [`flush`] ends a subcommand's output.

use std::fmt;
use std::io::{self, BufWriter, Write};

/// A reader closed the output before the subcommand was done writing it.
#[derive(Debug, thiserror::Error)]
#[error("the reader of the output closed it")]
pub struct Closed;

/// A failed write as the subcommands return it: [`Closed`] for a closed pipe, else the error.
pub fn of_io(e: io::Error) -> anyhow::Error {
    if e.kind() == io::ErrorKind::BrokenPipe {
        anyhow::Error::new(Closed)
    } else {
        anyhow::Error::new(e).context("writing the output")
    }
}

/// Whether `e` is (or wraps) [`Closed`].
pub fn is_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<Closed>())
}

/// Writes `args` to standard output (what [`out!`](crate::out) and [`outln!`](crate::outln) call).
pub fn write(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    io::stdout().lock().write_fmt(args).map_err(of_io)
}

/// Writes what standard output still buffers.
pub fn flush() -> anyhow::Result<()> {
    io::stdout().lock().flush().map_err(of_io)
}

/// Standard output, buffered, for a long output; its writes are `io::Result`s (`?` in a function
/// returning one), turned into [`Closed`] or an error by [`Stdout::finish`].
pub struct Stdout(BufWriter<io::StdoutLock<'static>>);

/// The buffered writer of a long output.
pub fn stdout() -> Stdout {
    Stdout(BufWriter::new(io::stdout().lock()))
}

impl Stdout {
    /// Flushes and says how the whole output went (`written`: how its writes went).
    pub fn finish(mut self, written: io::Result<()>) -> anyhow::Result<()> {
        written.and_then(|()| self.0.flush()).map_err(of_io)
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `print!` through [`write`]: a `Result`, [`Closed`] on a closed pipe.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

/// `println!` through [`write`]: a `Result`, [`Closed`] on a closed pipe.
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_closed_and_other_errors_keep_their_words() {
        assert!(is_closed(&of_io(io::Error::from(
            io::ErrorKind::BrokenPipe
        ))));
        let other = of_io(io::Error::other("disk on fire"));
        assert!(!is_closed(&other));
        assert!(format!("{other:#}").contains("disk on fire"));
    }
}
