# Runs as PID 1 of the private namespaces that tests/systemd/run makes, just
# before systemd takes over (sh -c "$(cat boot.sh)": /tmp is replaced here).
#
# The namespaces share the host's filesystem, and a booting systemd sets up
# what it believes is its own machine: systemd-tmpfiles would empty the host's
# /tmp, systemd-sysctl would write the host's kernel settings, the journal
# would land in the host's /var/log/journal. And the test installs the Debian
# package with apt, which writes /usr, /etc and dpkg's and apt's state under
# /var. So:
#   - an overlay over /usr, /etc and /var, its upper layer on a tmpfs: the
#     host's files show through, every write (dpkg's database, apt's locks
#     and logs, the package's files, the user sysusers adds to /etc/passwd)
#     goes to the tmpfs and is gone with the namespaces. dpkg and apt lock
#     their copies, never the host's files, so a host apt is not blocked;
#   - a tmpfs over /tmp, /var/tmp, the journal, systemd's state, /etc/inferd
#     and /var/lib/inferd, so that the test starts from empty folders;
#   - `/` made shared (recursively) inside these namespaces, for LoadCredential=
#     (see below);
#   - the units that touch shared state masked by bind-mounting /dev/null
#     over them. The target is basic.target, so nothing else of the host's
#     starts.
#
# KEEP_PATHS (from the environment) names folders that must stay visible
# although they may lie under one of those directories: the checkout and its
# build folder, which may well be in /tmp. Each is bind-mounted aside (on a
# tmpfs over /mnt, private to these namespaces) before the other mounts and
# bound back in place after them.
set -e
overlaid="/usr /etc /var"
covered="/tmp /var/tmp /var/log/journal /var/lib/systemd /etc/inferd /var/lib/inferd"
mount -t tmpfs -o mode=0755 tmpfs /mnt
n=0
for p in ${KEEP_PATHS:-}; do
        n=$((n + 1))
        mkdir -p "/mnt/keep$n"
        mount --bind "$p" "/mnt/keep$n"
done
for d in $overlaid; do
        mkdir -p "/mnt/overlay$d/upper" "/mnt/overlay$d/work"
        mount -t overlay overlay -o "lowerdir=$d,upperdir=/mnt/overlay$d/upper,workdir=/mnt/overlay$d/work" "$d"
done
for d in $covered; do
        # Made in the overlay when the host lacks it: the host gets no folder.
        mkdir -p "$d"
        mount -t tmpfs -o mode=0755 tmpfs "$d"
done
chmod 1777 /tmp /var/tmp
# A container's policy-rc.d (Docker's images exit 101: no service action in
# a build) is its builder's policy, not this booted system's: it goes, in the
# overlay only, so that the package's maintainer scripts act as on a host
# (the prerm's deb-systemd-invoke stop asks it).
rm -f /usr/sbin/policy-rc.d
n=0
for p in ${KEEP_PATHS:-}; do
        n=$((n + 1))
        mkdir -p "$p"
        mount --bind "/mnt/keep$n" "$p"
done
for u in systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-clean.service \
         systemd-tmpfiles-clean.timer systemd-sysctl.service systemd-modules-load.service systemd-binfmt.service \
         proc-sys-fs-binfmt_misc.automount systemd-remount-fs.service systemd-random-seed.service \
         systemd-firstboot.service systemd-udevd.service systemd-udev-trigger.service; do
        if [ -e "/lib/systemd/system/$u" ]; then
                mount --bind /dev/null "/lib/systemd/system/$u"
        fi
done
# Shared mount propagation, as a systemd started by the kernel sets up itself
# (mount_setup: `/` MS_REC|MS_SHARED) but one in a container (container=
# below) leaves to its manager. LoadCredential= needs it: systemd builds a
# unit's credentials in a child's own mount namespace ("(sd-mkdcreds)") and
# MS_MOVEs that tmpfs onto /run/credentials/<unit>, which reaches PID 1's
# namespace only by propagation; with unshare's --propagation private the
# unit got an empty $CREDENTIALS_DIRECTORY. The peer groups made here are new
# and these namespaces' own: nothing propagates to the host's mounts.
mount --make-rshared /
exec env container=other /lib/systemd/systemd --system --unit=basic.target --log-target=console
