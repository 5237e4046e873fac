//! Protocol and application numbers (nDPI's, so `L7_PROTO` means what it means in ntopng) with
//! their display names and default categories.

/// A protocol or application: nDPI's number. Total: any number converts, unknown ones print
/// as `Unknown(n)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Proto(pub u16);

/// What kind of traffic a flow is (nDPI's category names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Category {
    #[default]
    Unspecified = 0,
    Media,
    Vpn,
    Email,
    DataTransfer,
    Web,
    SocialNetwork,
    Download,
    Game,
    Chat,
    VoIP,
    Database,
    RemoteAccess,
    Cloud,
    Network,
    Collaborative,
    Rpc,
    Streaming,
    System,
    SoftwareUpdate,
    Music,
    Video,
    Shopping,
    Advertisement,
    IotScada,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Unspecified => "Unspecified",
            Category::Media => "Media",
            Category::Vpn => "VPN",
            Category::Email => "Email",
            Category::DataTransfer => "DataTransfer",
            Category::Web => "Web",
            Category::SocialNetwork => "SocialNetwork",
            Category::Download => "Download",
            Category::Game => "Game",
            Category::Chat => "Chat",
            Category::VoIP => "VoIP",
            Category::Database => "Database",
            Category::RemoteAccess => "RemoteAccess",
            Category::Cloud => "Cloud",
            Category::Network => "Network",
            Category::Collaborative => "Collaborative",
            Category::Rpc => "RPC",
            Category::Streaming => "Streaming",
            Category::System => "System",
            Category::SoftwareUpdate => "SoftwareUpdate",
            Category::Music => "Music",
            Category::Video => "Video",
            Category::Shopping => "Shopping",
            Category::Advertisement => "Advertisement",
            Category::IotScada => "IoT-Scada",
        }
    }

    /// Parses a name as written by [`Category::name`] (case-insensitive), for data files.
    pub fn from_name(s: &str) -> Option<Category> {
        ALL_CATEGORIES
            .iter()
            .copied()
            .find(|c| c.name().eq_ignore_ascii_case(s))
    }

    /// The category whose number (`category as u8`) is `n`, for stored records.
    pub fn from_number(n: u8) -> Option<Category> {
        ALL_CATEGORIES.iter().copied().find(|c| *c as u8 == n)
    }
}

/// Every category, in nDPI 4.2's numbering for the first 20 (the nDPI backend relies on it).
pub(crate) const ALL_CATEGORIES: [Category; 25] = [
    Category::Unspecified,
    Category::Media,
    Category::Vpn,
    Category::Email,
    Category::DataTransfer,
    Category::Web,
    Category::SocialNetwork,
    Category::Download,
    Category::Game,
    Category::Chat,
    Category::VoIP,
    Category::Database,
    Category::RemoteAccess,
    Category::Cloud,
    Category::Network,
    Category::Collaborative,
    Category::Rpc,
    Category::Streaming,
    Category::System,
    Category::SoftwareUpdate,
    Category::Music,
    Category::Video,
    Category::Shopping,
    Category::Advertisement,
    Category::IotScada,
];

macro_rules! protos {
    ($($konst:ident = $id:expr, $name:expr, $cat:ident;)*) => {
        impl Proto {
            $(pub const $konst: Proto = Proto($id);)*
        }
        /// (number, name, category) of every protocol and application sonde knows by name.
        pub const TABLE: &[(u16, &str, Category)] = &[$(($id, $name, Category::$cat),)*];
    };
}

protos! {
    UNKNOWN = 0, "Unknown", Unspecified;
    FTP_CONTROL = 1, "FTP_CONTROL", DataTransfer;
    POP3 = 2, "POP3", Email;
    SMTP = 3, "SMTP", Email;
    IMAP = 4, "IMAP", Email;
    DNS = 5, "DNS", Network;
    IPP = 6, "IPP", System;
    HTTP = 7, "HTTP", Web;
    MDNS = 8, "MDNS", Network;
    NTP = 9, "NTP", System;
    NETBIOS = 10, "NetBIOS", System;
    NFS = 11, "NFS", DataTransfer;
    SSDP = 12, "SSDP", System;
    BGP = 13, "BGP", Network;
    SNMP = 14, "SNMP", Network;
    SMBV1 = 16, "SMBv1", System;
    SYSLOG = 17, "Syslog", System;
    DHCP = 18, "DHCP", Network;
    POSTGRES = 19, "PostgreSQL", Database;
    MYSQL = 20, "MySQL", Database;
    POPS = 23, "POPS", Email;
    NTOP = 26, "ntop", Network;
    COAP = 27, "COAP", IotScada;
    SMTPS = 29, "SMTPS", Email;
    DTLS = 30, "DTLS", Web;
    BITTORRENT = 37, "BitTorrent", Download;
    SIGNAL = 39, "Signal", Chat;
    SMBV23 = 41, "SMBv23", System;
    MODBUS = 44, "Modbus", IotScada;
    WHATSAPP_CALL = 45, "WhatsAppCall", VoIP;
    TIKTOK = 49, "TikTok", SocialNetwork;
    RTSP = 50, "RTSP", Media;
    IMAPS = 51, "IMAPS", Email;
    DISCORD = 58, "Discord", Collaborative;
    OCSP = 63, "OCSP", Network;
    IRC = 65, "IRC", Chat;
    TELNET = 77, "Telnet", RemoteAccess;
    STUN = 78, "STUN", Network;
    IPSEC = 79, "IPSec", Vpn;
    GRE = 80, "GRE", Network;
    ICMP = 81, "ICMP", Network;
    IGMP = 82, "IGMP", Network;
    RTP = 87, "RTP", Media;
    RDP = 88, "RDP", RemoteAccess;
    VNC = 89, "VNC", RemoteAccess;
    TLS = 91, "TLS", Web;
    SSH = 92, "SSH", RemoteAccess;
    TFTP = 96, "TFTP", DataTransfer;
    SIP = 100, "SIP", VoIP;
    ICMPV6 = 102, "ICMPV6", Network;
    DHCPV6 = 103, "DHCPV6", Network;
    KERBEROS = 111, "Kerberos", Network;
    LDAP = 112, "LDAP", System;
    SLACK = 118, "Slack", Collaborative;
    FACEBOOK = 119, "Facebook", SocialNetwork;
    TWITTER = 120, "Twitter", SocialNetwork;
    DROPBOX = 121, "Dropbox", Cloud;
    GMAIL = 122, "GMail", Email;
    GOOGLE_MAPS = 123, "GoogleMaps", Web;
    YOUTUBE = 124, "YouTube", Media;
    SKYPE_TEAMS = 125, "Skype_Teams", VoIP;
    GOOGLE = 126, "Google", Web;
    NETFLOW = 128, "NetFlow", Network;
    SFLOW = 129, "sFlow", Network;
    HTTP_CONNECT = 130, "HTTP_Connect", Web;
    HTTP_PROXY = 131, "HTTP_Proxy", Web;
    NETFLIX = 133, "NetFlix", Video;
    HULU = 137, "Hulu", Streaming;
    APPLE = 140, "Apple", Web;
    WEBEX = 141, "Webex", VoIP;
    WHATSAPP = 142, "WhatsApp", Chat;
    APPLE_ICLOUD = 143, "AppleiCloud", Web;
    VIBER = 144, "Viber", VoIP;
    APPLE_ITUNES = 145, "AppleiTunes", Streaming;
    RADIUS = 146, "Radius", Network;
    WINDOWS_UPDATE = 147, "WindowsUpdate", SoftwareUpdate;
    TEAMVIEWER = 148, "TeamViewer", RemoteAccess;
    GTP = 152, "GTP", Network;
    LLMNR = 154, "LLMNR", Network;
    SPOTIFY = 156, "Spotify", Music;
    MESSENGER = 157, "Messenger", Chat;
    OPENVPN = 159, "OpenVPN", Vpn;
    TOR = 163, "Tor", Vpn;
    RTCP = 165, "RTCP", VoIP;
    FTP_DATA = 175, "FTP_DATA", Download;
    WIKIPEDIA = 176, "Wikipedia", Web;
    CNN = 180, "CNN", Web;
    AMAZON = 178, "Amazon", Web;
    TELEGRAM = 185, "Telegram", Chat;
    QUIC = 188, "QUIC", Web;
    ZOOM = 189, "Zoom", Video;
    TWITCH = 195, "Twitch", Video;
    DOH_DOT = 196, "DoH_DoT", Network;
    WECHAT = 197, "WeChat", Chat;
    SNAPCHAT = 199, "Snapchat", SocialNetwork;
    GITHUB = 203, "Github", Collaborative;
    REDDIT = 205, "Reddit", SocialNetwork;
    WIREGUARD = 206, "WireGuard", Vpn;
    DNSCRYPT = 208, "DNScrypt", Network;
    INSTAGRAM = 211, "Instagram", SocialNetwork;
    MICROSOFT = 212, "Microsoft", Cloud;
    TEREDO = 214, "Teredo", Network;
    GOOGLE_DRIVE = 217, "GoogleDrive", Cloud;
    MICROSOFT_365 = 219, "Microsoft365", Collaborative;
    CLOUDFLARE = 220, "Cloudflare", Web;
    MS_ONE_DRIVE = 221, "MS_OneDrive", Cloud;
    MQTT = 222, "MQTT", IotScada;
    PLAYSTORE = 228, "PlayStore", SoftwareUpdate;
    LINKEDIN = 233, "LinkedIn", SocialNetwork;
    SOUNDCLOUD = 234, "SoundCloud", Music;
    APPLE_PUSH = 238, "ApplePush", Cloud;
    GOOGLE_SERVICES = 239, "GoogleServices", Web;
    AMAZON_VIDEO = 240, "AmazonVideo", Video;
    GOOGLE_DOCS = 241, "GoogleDocs", Collaborative;
    MSTEAMS = 250, "Teams", Collaborative;
    ANYDESK = 252, "AnyDesk", RemoteAccess;
    GITLAB = 262, "GitLab", Collaborative;
    AVAST_SECUREDNS = 263, "AVASTSecureDNS", Network;
    AMAZON_AWS = 265, "AmazonAWS", Cloud;
}

/// Names of protocols outside [`TABLE`], learnt from a DPI backend (nDPI's full list).
static EXTRA_NAMES: std::sync::OnceLock<std::collections::HashMap<u16, &'static str>> =
    std::sync::OnceLock::new();

/// Registers names for protocol numbers sonde's table lacks (once per process; later calls
/// are ignored). The strings live for the rest of the process.
pub fn register_extra_names(names: Vec<(u16, String)>) {
    let map = names
        .into_iter()
        .filter(|(id, _)| !TABLE.iter().any(|e| e.0 == *id))
        .map(|(id, n)| (id, &*Box::leak(n.into_boxed_str())))
        .collect();
    let _ = EXTRA_NAMES.set(map);
}

impl Proto {
    pub fn is_known(self) -> bool {
        self.0 != 0
    }

    fn entry(self) -> Option<&'static (u16, &'static str, Category)> {
        TABLE.iter().find(|e| e.0 == self.0)
    }

    /// nDPI's display name, or `Unknown`.
    pub fn name(self) -> &'static str {
        if let Some(e) = self.entry() {
            return e.1;
        }
        EXTRA_NAMES
            .get()
            .and_then(|m| m.get(&self.0).copied())
            .unwrap_or("Unknown")
    }

    pub fn category(self) -> Category {
        self.entry().map(|e| e.2).unwrap_or_default()
    }

    /// Looks a protocol up by its display name (case-insensitive), for data files and for
    /// the application names of collected records (once per record: a hash look-up, not a
    /// scan of the table).
    pub fn from_name(s: &str) -> Option<Proto> {
        static BY_NAME: std::sync::OnceLock<std::collections::HashMap<Vec<u8>, u16>> =
            std::sync::OnceLock::new();
        const LONGEST: usize = 64;
        if s.is_empty() || s.len() > LONGEST {
            return None;
        }
        let map = BY_NAME.get_or_init(|| {
            TABLE
                .iter()
                .rev() // the first entry of a name wins, as with a scan
                .map(|e| (e.1.to_ascii_lowercase().into_bytes(), e.0))
                .collect()
        });
        let mut buf = [0u8; LONGEST];
        let key = &mut buf[..s.len()];
        key.copy_from_slice(s.as_bytes());
        key.make_ascii_lowercase();
        map.get(&key[..]).map(|&id| Proto(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_found_in_any_case() {
        for e in TABLE {
            let first = TABLE
                .iter()
                .find(|x| x.1.eq_ignore_ascii_case(e.1))
                .unwrap();
            assert_eq!(Proto::from_name(e.1), Some(Proto(first.0)), "{}", e.1);
            assert_eq!(
                Proto::from_name(&e.1.to_ascii_uppercase()),
                Some(Proto(first.0))
            );
        }
        assert_eq!(Proto::from_name(""), None);
        assert_eq!(Proto::from_name("no such protocol"), None);
        assert_eq!(Proto::from_name(&"x".repeat(500)), None);
    }
}
