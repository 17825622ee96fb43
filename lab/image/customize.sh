
set -eu
root="$1"
echo apn-lab > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tapn-lab\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    > "$root/etc/hosts"
printf 'LABEL=%(label)s / ext4 errors=remount-ro 0 1\n' > "$root/etc/fstab"
printf 'auto lo\niface lo inet loopback\n\nallow-hotplug eth0\niface eth0 inet dhcp\n' \
    > "$root/etc/network/interfaces"
cat > "$root/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
EOF
chroot "$root" useradd -m -s /bin/bash -U vagrant
echo vagrant:vagrant | chroot "$root" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' > "$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
install -d -m 0700 -o 1000 -g 1000 "$root/home/vagrant/.ssh"
echo 'UseDNS no' > "$root/etc/ssh/sshd_config.d/vagrant.conf"
# Host keys are made per box (lab/vm-image --box), never shared by every image.
rm -f "$root"/etc/ssh/ssh_host_*
# apt's daily jobs would take the dpkg lock during the first `vagrant up`.
for unit in apt-daily.timer apt-daily-upgrade.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
chroot "$root" systemctl enable ssh.service >/dev/null 2>&1 || true
if [ -d "$root/tmp/extra-ca" ]; then
    cp "$root"/tmp/extra-ca/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true
    rm -rf "$root/tmp/extra-ca"
    chroot "$root" update-ca-certificates >/dev/null
fi
chroot "$root" bash /tmp/provision --vm --no-venv
rm -f "$root/tmp/provision"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages
