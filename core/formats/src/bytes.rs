//! The one bounds check of this crate's binary readers ([`crate::columns::Reader`] and the
//! instrumented record's): each names what was cut short in its own error. Nothing here allocates.

/// The `need` bytes of `bytes` from `*at` on, moving `*at` past them; `None`, with `*at` left as it
/// was, where fewer are left.
pub(crate) fn take_at<'a>(bytes: &'a [u8], at: &mut usize, need: u64) -> Option<&'a [u8]> {
    let n = usize::try_from(need).ok()?;
    let out = bytes.get(*at..at.checked_add(n)?)?;
    *at += n;
    Some(out)
}
